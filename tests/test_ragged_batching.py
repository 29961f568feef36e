"""Ragged batching black-box (allow_ragged_batch, batch_input, batch_output): requests of
different lengths share one batch without padding, the batch inputs the model gets are
Triton's, and a batch output goes back to each request in its input's shape. ONNX Runtime
and PyTorch models get the ragged input as one 1-D tensor; a Python model gets each
request apart and no batch inputs, as Triton 2.51's Python backend (checked against it
where it is installed, tests/triton_peer.py); so does a model of a Python-based backend
(`<backend-directory>/<backend>/model.py`), which Triton runs on its Python backend."""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer
from triton_peer import TritonPeer, find_triton

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 120
# Three requests of different lengths: they batch only when the input is ragged.
LENGTHS = [2, 5, 3]
# Every batch input kind, each read from the one ragged input IN.
BATCH_INPUTS = """batch_input [
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_FP32 source_input: "IN" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "ENDS" data_type: TYPE_INT32
    source_input: "IN" },
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "STARTS"
    data_type: TYPE_INT32 source_input: "IN" },
  { kind: BATCH_MAX_ELEMENT_COUNT_AS_SHAPE target_name: "LONGEST" data_type: TYPE_INT32
    source_input: "IN" },
  { kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "IN" },
  { kind: BATCH_ITEM_SHAPE_FLATTEN target_name: "FLAT" data_type: TYPE_INT32
    source_input: "IN" }
]
batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "DOUBLED"
  source_input: "IN" } ]
"""
# What each request gets back, besides DOUBLED (its input times two): its own row of each
# per-request batch input, and the longest request's length.
FRAMEWORK_OUTPUTS = """output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "COUNT_OUT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "ENDS_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "STARTS_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "LONGEST_OUT" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "SHAPES_OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "FLAT_OUT" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""


def _config(name: str, backend: str, outputs: str, more: str = "") -> str:
    return (
        f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        f"{outputs}{BATCH_INPUTS}"
        # A batch leaves once the three requests are in (or after 20 s, which fails).
        "dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 20000000 }\n"
        f"{more}"
    )


def _onnx_model() -> bytes:
    from onnx import TensorProto, helper
    from onnx_support import model, vi

    node = helper.make_node
    rows = helper.make_tensor("AXIS1", TensorProto.INT64, [1], [1])
    nodes = [
        node("Add", ["IN", "IN"], ["DOUBLED"]),
        node("Unsqueeze", ["COUNT", "AXIS1"], ["COUNT_OUT"]),
        node("Unsqueeze", ["ENDS", "AXIS1"], ["ENDS_OUT"]),
        # STARTS has one value more than there are requests: each gets its start.
        node("Shape", ["ENDS"], ["N"]),
        node("Slice", ["STARTS", "ZERO", "N"], ["STARTS_N"]),
        node("Unsqueeze", ["STARTS_N", "AXIS1"], ["STARTS_OUT"]),
        # LONGEST carries its meaning in its shape.
        node("Shape", ["LONGEST"], ["LONGEST_LEN"]),
        node("Unsqueeze", ["LONGEST_LEN", "AXIS1"], ["LONGEST_11"]),
        node("Shape", ["COUNT_OUT"], ["N1"]),
        node("Expand", ["LONGEST_11", "N1"], ["LONGEST_OUT"]),
        node("Identity", ["SHAPES"], ["SHAPES_OUT"]),
        node("Unsqueeze", ["FLAT", "AXIS1"], ["FLAT_OUT"]),
    ]
    zero = helper.make_tensor("ZERO", TensorProto.INT64, [1], [0])
    f32, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    return model(
        nodes,
        [
            vi("IN", f32, ["total"]),
            vi("COUNT", f32, ["n"]),
            vi("ENDS", i32, ["n"]),
            vi("STARTS", i32, ["n1"]),
            vi("LONGEST", i32, ["longest"]),
            vi("SHAPES", i32, ["items", 1]),
            vi("FLAT", i32, ["items"]),
        ],
        [
            vi("DOUBLED", f32, ["total"]),
            vi("COUNT_OUT", f32, ["n", 1]),
            vi("ENDS_OUT", i32, ["n", 1]),
            vi("STARTS_OUT", i32, ["n", 1]),
            vi("LONGEST_OUT", i64, ["n", 1]),
            vi("SHAPES_OUT", i32, ["items", 1]),
            vi("FLAT_OUT", i32, ["items", 1]),
        ],
        initializers=[rows, zero],
    )


PYTHON_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {t.name(): list(t.as_numpy().shape) for t in request.inputs()}
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("DOUBLED", (values * 2).astype(np.float32)),
                pb_utils.Tensor("SEEN", np.array([json.dumps(seen).encode()], dtype=object)),
            ]))
        return responses
"""

PYTHON_OUTPUTS = """output [
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }
]
"""


PING_CONFIG = """name: "ping"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
PING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy())])
            for r in requests
        ]
"""


def _repository(root: Path, backends: list[str]) -> Path:
    """ragged_<backend> for each of `backends` (onnx, torch, python), and `ping`, which
    answers at once (_send_together's first request)."""
    (root / "ping" / "1").mkdir(parents=True)
    (root / "ping" / "config.pbtxt").write_text(PING_CONFIG)
    (root / "ping" / "1" / "model.py").write_text(PING_MODEL)
    for backend in backends:
        name = f"ragged_{backend}"
        version = root / name / "1"
        version.mkdir(parents=True)
        if backend == "onnx":
            (version / "model.onnx").write_bytes(_onnx_model())
            config = _config(name, "onnxruntime", FRAMEWORK_OUTPUTS)
        elif backend == "torch":
            from torch_models import ONE_THREAD, RaggedBatchIO, build_model

            config = _config(name, "pytorch", FRAMEWORK_OUTPUTS, ONE_THREAD)
            build_model(root, name, config, RaggedBatchIO)
            continue
        else:
            (version / "model.py").write_text(PYTHON_MODEL)
            config = _config(name, "python", PYTHON_OUTPUTS)
        (root / name / "config.pbtxt").write_text(config)
    return root


def _send_together(host: str, model: str, outputs: list[str]) -> list[dict]:
    """One request per length in LENGTHS (IN = k*10 + 0..n-1, shape [1, n]), sent at once
    from a client each; each client first sends `ping` a request, so that the server
    knows every connection that may still send (a batch leaves early only when each known
    connection waits for an answer). Each answer's outputs, by name."""
    known = threading.Barrier(len(LENGTHS))

    def send(k: int) -> dict:
        values = (k * 10 + np.arange(LENGTHS[k], dtype=np.float32)).reshape(1, -1)
        with httpclient.InferenceServerClient(host, network_timeout=TIMEOUT) as client:
            ping = httpclient.InferInput("IN", [1], "FP32")
            ping.set_data_from_numpy(np.zeros(1, dtype=np.float32))
            client.infer("ping", [ping])
            known.wait(timeout=TIMEOUT)
            tensor = httpclient.InferInput("IN", list(values.shape), "FP32")
            tensor.set_data_from_numpy(values)
            wanted = [httpclient.InferRequestedOutput(name) for name in outputs]
            result = client.infer(model, [tensor], outputs=wanted)
            return {name: result.as_numpy(name) for name in outputs}

    with ThreadPoolExecutor(len(LENGTHS)) as pool:
        return list(pool.map(send, range(len(LENGTHS))))


def _batches(url: str, model: str) -> dict:
    """The model's executions and batch sizes once its LENGTHS requests are counted
    (Triton counts a request only after its response is sent: polled until then)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        stats = requests.get(f"{url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
        entry = stats["model_stats"][0]
        counted = entry["inference_stats"]["success"]["count"]
        if counted >= len(LENGTHS) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return {
        "executions": entry["execution_count"],
        "sizes": sorted(b["batch_size"] for b in entry["batch_stats"]),
    }


def _expected_framework(answers: list[dict]) -> None:
    """The three requests ran as one batch of IN joined in arrival order; the batch's
    order is the server's, so each answer is checked against its own place in it."""
    longest = max(LENGTHS)
    for k, answer in enumerate(answers):
        values = (k * 10 + np.arange(LENGTHS[k], dtype=np.float32)).reshape(1, -1)
        np.testing.assert_array_equal(answer["DOUBLED"], values * 2)
        assert answer["DOUBLED"].shape == (1, LENGTHS[k])
        assert answer["COUNT_OUT"].tolist() == [[float(LENGTHS[k])]]
        assert answer["SHAPES_OUT"].tolist() == [[LENGTHS[k]]]
        assert answer["FLAT_OUT"].tolist() == [[LENGTHS[k]]]
        assert answer["LONGEST_OUT"].tolist() == [[longest]]
        end = int(answer["ENDS_OUT"][0, 0])
        start = int(answer["STARTS_OUT"][0, 0])
        assert end - start == LENGTHS[k]
    # The requests' runs tile the batch's 1-D input: starts and ends chain up.
    runs = sorted((int(a["STARTS_OUT"][0, 0]), int(a["ENDS_OUT"][0, 0])) for a in answers)
    assert runs[0][0] == 0 and runs[-1][1] == sum(LENGTHS)
    assert all(left[1] == right[0] for left, right in zip(runs, runs[1:]))


FRAMEWORK_NAMES = [
    "DOUBLED",
    "COUNT_OUT",
    "ENDS_OUT",
    "STARTS_OUT",
    "LONGEST_OUT",
    "SHAPES_OUT",
    "FLAT_OUT",
]


@pytest.fixture(scope="module")
def naiad(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    root = tmp_path_factory.mktemp("ragged")
    backends = ["onnx", "python"]
    try:
        import torch  # noqa: F401

        backends.append("torch")
    except ImportError:
        pass
    repository = _repository(root / "models", backends)
    with NaiadServer(repository, log_dir=root) as server:
        server.backends = backends
        yield server


def test_onnx_requests_of_different_lengths_share_one_batch(naiad):
    answers = _send_together(f"{naiad.host}:{naiad.http_port}", "ragged_onnx", FRAMEWORK_NAMES)
    assert _batches(naiad.url, "ragged_onnx") == {"executions": 1, "sizes": [3]}
    _expected_framework(answers)


def test_pytorch_requests_of_different_lengths_share_one_batch(naiad):
    if "torch" not in naiad.backends:
        pytest.skip("torch is not installed")
    answers = _send_together(f"{naiad.host}:{naiad.http_port}", "ragged_torch", FRAMEWORK_NAMES)
    assert _batches(naiad.url, "ragged_torch") == {"executions": 1, "sizes": [3]}
    _expected_framework(answers)


def _python_answers(host: str, model: str = "ragged_python") -> list:
    answers = _send_together(host, model, ["DOUBLED", "SEEN"])
    return [
        (answer["DOUBLED"].tolist(), json.loads(answer["SEEN"][0].decode())) for answer in answers
    ]


def test_python_model_gets_each_request_apart_without_batch_inputs(naiad):
    answers = _python_answers(f"{naiad.host}:{naiad.http_port}")
    assert _batches(naiad.url, "ragged_python") == {"executions": 1, "sizes": [3]}
    for k, (doubled, seen) in enumerate(answers):
        assert doubled == [[2 * (k * 10 + i) for i in range(LENGTHS[k])]]
        assert seen == {"IN": [1, LENGTHS[k]]}


@pytest.mark.skipif(find_triton() is None, reason="Triton 2.51 is not installed (/tmp/peers)")
def test_python_model_sees_what_it_sees_in_triton(naiad, tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    for name in ("ping", "ragged_python"):
        shutil.copytree(naiad.repository / name, root / name)
    with TritonPeer(root, tmp_path, []) as triton:
        expected = _python_answers(f"127.0.0.1:{triton.http_port}")
        triton_batches = _batches(triton.url, "ragged_python")
    assert _python_answers(f"{naiad.host}:{naiad.http_port}") == expected
    assert triton_batches == {"executions": 1, "sizes": [3]}


# A Python-based backend whose model.py is the Python model's, and a model naming it.
BASED_BACKEND = "ragged_seen"
BASED_MODEL = "ragged_based"


@pytest.fixture(scope="module")
def based(tmp_path_factory):
    """A repository with `ping` and BASED_MODEL, and the backend folder it runs from."""
    root = tmp_path_factory.mktemp("ragged_based")
    (root / "backends" / BASED_BACKEND).mkdir(parents=True)
    (root / "backends" / BASED_BACKEND / "model.py").write_text(PYTHON_MODEL)
    models = _repository(root / "models", [])
    (models / BASED_MODEL / "1").mkdir(parents=True)
    config = _config(BASED_MODEL, BASED_BACKEND, PYTHON_OUTPUTS)
    (models / BASED_MODEL / "config.pbtxt").write_text(config)
    return root, models, root / "backends"


def _based_answers(url: str, host: str) -> tuple:
    return _python_answers(host, BASED_MODEL), _batches(url, BASED_MODEL)


def test_python_based_backend_model_gets_each_request_apart_without_batch_inputs(based):
    root, models, backends = based
    flags = [f"--backend-directory={backends}"]
    with NaiadServer(models, log_dir=root, extra_args=flags) as server:
        answers, batches = _based_answers(server.url, f"{server.host}:{server.http_port}")
    assert batches == {"executions": 1, "sizes": [3]}
    for k, (doubled, seen) in enumerate(answers):
        assert doubled == [[2 * (k * 10 + i) for i in range(LENGTHS[k])]]
        assert seen == {"IN": [1, LENGTHS[k]]}


@pytest.mark.skipif(find_triton() is None, reason="Triton 2.51 is not installed (/tmp/peers)")
def test_python_based_backend_model_sees_what_it_sees_in_triton(based):
    root, models, backends = based
    # Triton runs a Python-based backend on its own python backend, found in the same
    # --backend-directory: a link to the peer's (Naiad's Python backend is built in).
    prefix, _ = find_triton()
    peer = next(arg for arg in prefix if arg.startswith("--backend-directory="))
    python = backends / "python"
    if not python.exists():
        python.symlink_to(Path(peer.split("=", 1)[1]) / "python", target_is_directory=True)
    flags = [f"--backend-directory={backends}"]
    with TritonPeer(models, root, flags) as triton:
        triton.wait_ready(["ping", BASED_MODEL])
        expected = _based_answers(triton.url, f"127.0.0.1:{triton.http_port}")
    with NaiadServer(models, log_dir=root, extra_args=flags) as server:
        assert _based_answers(server.url, f"{server.host}:{server.http_port}") == expected


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT64 '
            'source_input: "IN" } ]',
            "batch input data type must be TYPE_INT32 or TYPE_FP32 for bad",
        ),
        (
            'batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "C" data_type: TYPE_INT32 '
            'source_input: "NOPE" } ]',
            "unknown source input name 'NOPE' for bad",
        ),
        (
            "batch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "
            '"NOPE" source_input: "IN" } ]',
            "unknown target output name 'NOPE' for bad",
        ),
        (
            'batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "C" data_type: TYPE_INT32 '
            'source_input: [ "IN", "IN" ] } ]',
            "batch input kind 'BATCH_ITEM_SHAPE' expects 1 source input, got 2 for bad",
        ),
    ],
)
def test_malformed_batch_io_is_refused_with_tritons_words(tmp_path, entry, message):
    from naiad.repository.config import parse_model_config, version_refusal

    text = (
        'name: "bad"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { kind: KIND_CPU } ]\n"
        f"{entry}\n"
    )
    assert version_refusal(parse_model_config(text)) == f"Invalid argument: {message}"
