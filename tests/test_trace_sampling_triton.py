"""Differential: which requests the trace sampler picks, on Naiad and on the real Triton
2.51 (tests/triton_peer.py; skipped, saying why, where it is not installed). Triton
counts per trace setting (server src/tracer.cc: TraceSetting::SampleTrace): the requests
of every model without a setting of its own count together under the global setting,
a model with a setting of its own counts apart, and an update makes new settings whose
counts start over. Same requests, in the same order, to both; the request ids of the
traced requests compared."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]

PIPELINES = Path(__file__).resolve().parent / "pipeline_models"


def _requests(http_port: int) -> None:
    """Alternates add_sub (r*) and ensemble_add_sub (e*) requests over three settings:
    the global rate 3; then ensemble_add_sub's own rate 2; then a global rate 2."""
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    settings = f"http://127.0.0.1:{http_port}/v2"

    def send(numbers) -> None:
        for n in numbers:
            client.infer("add_sub", inputs, request_id=f"r{n}")
            client.infer("ensemble_add_sub", inputs, request_id=f"e{n}")

    send(range(1, 4))
    answer = requests.post(
        f"{settings}/models/ensemble_add_sub/trace/setting", json={"trace_rate": "2"}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    send(range(4, 7))
    answer = requests.post(f"{settings}/trace/setting", json={"trace_rate": "2"}, timeout=10)
    assert answer.status_code == 200, answer.text
    send(range(7, 9))
    client.close()


def _traced(directory: Path) -> list:
    """The request ids of the traced requests (root traces), in every file written."""
    traced = []
    for path in sorted(directory.glob("trace.json*")):
        for record in json.loads(path.read_text() or "[]"):
            if "model_name" in record and "parent_id" not in record:
                traced.append(record["request_id"])
    return sorted(traced, key=lambda rid: (int(rid[1:]), rid[0]))


def test_the_sampler_counts_per_setting_as_triton(tmp_path):
    repository = make_repository(
        tmp_path / "repo", {"add_sub": None, "ensemble_add_sub": PIPELINES / "ensemble_add_sub"}
    )
    traced = {}
    for name in ("triton", "naiad"):
        (tmp_path / name).mkdir()
        flags = ["--trace-config", f"triton,file={tmp_path / name / 'trace.json'}"]
        flags += ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=3"]
        flags += ["--trace-config", "triton,log-frequency=1"]
        if name == "triton":
            with TritonPeer(repository, tmp_path, flags) as triton:
                _requests(triton.http_port)
                triton.process.send_signal(signal.SIGTERM)
                triton.process.wait(60)
        else:
            with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
                _requests(server.http_port)
                assert server.stop() == 0
        traced[name] = _traced(tmp_path / name)
    # Global rate 3 over r1 e1 r2 e2 r3 e3: the 3rd and 6th requests. Then the
    # ensemble's own rate 2 (e4 e5 e6: its 2nd) while add_sub's count goes on (r4 r5
    # r6 are the 7th to 9th: r6). Then a new global setting, rate 2, and with it a new
    # setting for the ensemble (it only overrides the rate): both count from 0.
    assert traced["naiad"] == ["r2", "e3", "e5", "r6", "e8", "r8"]
    assert traced["naiad"] == traced["triton"]
