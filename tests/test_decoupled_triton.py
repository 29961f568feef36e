"""Differential: decoupled models and the generate extension over HTTP, sent to Naiad
and to the real Triton 2.51 (its Python backend) with the same model repository; the
status, content type and body (each Server-Sent Event) must be the same.

Left out on purpose (README): a model's own exception text (Triton names the instance
and formats the traceback its own way), a decoupled model that never sends the final
flag (Triton leaves the client waiting forever; Naiad ends the request with an error),
and the parameters `priority`, `timeout` and `binary_data_output` (Triton hands them to
the model from generate; Naiad keeps them from the model, as for /infer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

DECOUPLED_MODELS = Path(__file__).resolve().parent / "decoupled_models"
TIMEOUT = 20

CASES = [
    (
        "infer",
        "repeat",
        {"inputs": [{"name": "N", "datatype": "INT32", "shape": [1], "data": [3]}]},
    ),
    ("generate", "repeat", {"N": 3}),
    ("generate", "repeat", {"N": 1}),
    ("generate", "repeat", {"N": 1, "mode": "inline", "id": "one"}),
    ("generate", "repeat", {"N": 0, "mode": "inline"}),
    ("generate", "repeat", {"N": 0, "mode": "error_last"}),
    ("generate", "repeat", {"X": 1}),
    ("generate", "nosuch", {}),
    ("generate", "text_echo", {"text_input": "hello", "VALUES": [1.5, 2], "n": 3, "id": "q1"}),
    ("generate", "text_echo", {"text_input": ["a", "b"], "VALUES": 3, "temp": 0.5}),
    ("generate", "text_echo", {"text_input": "a", "text_output": "b", "flag": True}),
    ("generate", "text_echo", "bad"),
    ("generate", "text_echo", "[1]"),
    ("generate", "text_echo", {"text_input": "a", "o": {"x": 1}}),
    ("generate", "text_echo", {"text_input": "a", "VALUES": ["x"]}),
    ("generate", "text_echo", {"text_input": "a", "VALUES": [[1, 2], [3, 4]]}),
    ("generate", "text_echo", {"text_input": 5}),
    ("generate_stream", "repeat", {"N": 3}),
    ("generate_stream", "repeat", {"N": 3, "mode": "inline", "id": "abc"}),
    ("generate_stream", "repeat", {"N": 3, "mode": "error_last"}),
    ("generate_stream", "repeat", {"N": 0, "mode": "error_last"}),
    ("generate_stream", "repeat", {"N": 0, "mode": "inline"}),
    ("generate_stream", "repeat", {"N": 1, "mode": "after_final"}),
    ("generate_stream", "repeat", {"X": 1}),
    ("generate_stream", "text_echo", {"text_input": ["x"], "VALUES": [1, 2, 3]}),
    ("generate_stream", "text_echo", "bad"),
    # Decoupled ensembles: a response per response of repeat (through int_double in
    # ens_decoupled), and a BLS call reading one.
    ("generate_stream", "ens_decoupled", {"N": 3, "mode": "inline"}),
    ("generate_stream", "ens_decoupled", {"N": 0, "mode": "inline"}),
    ("generate_stream", "ens_repeat", {"N": 3}),
    ("generate_stream", "ens_repeat", {"N": 2, "mode": "error_last"}),
    ("generate", "ens_repeat", {"N": 1, "mode": "inline"}),
    ("generate", "ens_repeat", {"N": 3}),
    ("generate", "bls_stream", {"N": 4, "target": "ens_repeat"}),
]
PIPELINE_MODELS = DECOUPLED_MODELS.parent / "pipeline_models"
MODELS = {
    "repeat": DECOUPLED_MODELS / "repeat",
    "text_echo": DECOUPLED_MODELS / "text_echo",
    "bls_stream": DECOUPLED_MODELS / "bls_stream",
    "int_double": PIPELINE_MODELS / "int_double",
    "ens_decoupled": PIPELINE_MODELS / "ens_decoupled",
    "ens_repeat": PIPELINE_MODELS / "ens_repeat",
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoupled_triton")
    repository = make_repository(root / "models", MODELS)
    naiad = NaiadServer(repository, log_dir=root).start()
    try:
        with TritonPeer(repository, root, []) as triton:
            triton.wait_ready(MODELS, timeout=60)
            yield naiad.url, triton.url
    finally:
        naiad.stop()


def _answer(url: str, action: str, model: str, body) -> tuple:
    data = body if isinstance(body, str) else json.dumps(body)
    r = requests.post(f"{url}/v2/models/{model}/{action}", data=data, timeout=TIMEOUT)
    content_type = r.headers.get("content-type")
    if content_type and content_type.startswith("text/event-stream"):
        events = [json.loads(e[len("data: ") :]) for e in r.text.split("\n\n") if e]
        return r.status_code, content_type, events
    return r.status_code, content_type, r.json()


@pytest.mark.parametrize("action, model, body", CASES)
def test_same_answer_as_triton(servers, action, model, body):
    naiad, triton = servers
    assert _answer(naiad, action, model, body) == _answer(triton, action, model, body)


def _raw_answer(url: str, action: str, body: dict, accept: str) -> tuple:
    """(status, Content-Encoding, the body's bytes as sent, not decoded)."""
    r = requests.post(
        f"{url}/v2/models/repeat/{action}",
        data=json.dumps(body),
        headers={"Accept-Encoding": accept},
        timeout=TIMEOUT,
        stream=True,
    )
    return r.status_code, r.headers.get("content-encoding"), r.raw.read(decode_content=False)


@pytest.mark.parametrize("accept", ["gzip", "deflate", "gzip;q=0.5, deflate;q=0.8"])
@pytest.mark.parametrize("action", ["generate", "generate_stream"])
def test_generate_answers_uncompressed_as_triton(servers, action, accept):
    """Triton 2.51 compresses /infer answers per Accept-Encoding but not the generate
    extension's: both answer plain bytes and no Content-Encoding."""
    naiad, triton = servers
    body = {"N": 1 if action == "generate" else 2, "mode": "inline", "id": "z"}
    theirs = _raw_answer(triton, action, body, accept)
    assert theirs[1] is None and theirs[2].startswith((b"{", b"data: "))
    assert _raw_answer(naiad, action, body, accept) == theirs
