"""The trace extension on Naiad alone: the timestamps of a trace are in the order the
events happen and inside the client's own view of the request, the general path is
traced too, and settings changed at run time take effect (the comparisons with the
real Triton are in grpc_clients/test_grpc_trace_triton.py)."""

from __future__ import annotations

import gzip
import json
import time

import numpy as np
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository

_ORDER = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]


def _body(request_id: str) -> bytes:
    values = list(range(16))
    return json.dumps(
        {
            "id": request_id,
            "inputs": [
                {"name": n, "datatype": "FP32", "shape": [1, 16], "data": values}
                for n in ("INPUT0", "INPUT1")
            ],
        }
    ).encode()


def _traces(trace_file) -> dict:
    """request id -> {timestamp name: ns} of each trace in the file."""
    records = json.loads(trace_file.read_text())
    by_id: dict = {}
    for record in records:
        by_id.setdefault(record["id"], {})
        if "model_name" in record:
            by_id[record["id"]]["request"] = record["request_id"]
        for stamp in record.get("timestamps", []):
            by_id[record["id"]][stamp["name"]] = stamp["ns"]
    return {trace.pop("request"): trace for trace in by_id.values()}


def test_timestamps_in_order_for_plain_and_compressed_bodies(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    trace_file = tmp_path / "trace.json"
    flags = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "level=TIMESTAMPS"]
    flags += ["--trace-config", "rate=1"]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
        url = server.url + "/v2/models/add_sub/infer"
        before = time.monotonic_ns()
        # `requests` asks for gzip by default, and a compressed answer is the general
        # path's (http/routes.py): ask for none, so the lane takes it.
        plain = {"Accept-Encoding": "identity"}
        assert requests.post(url, data=_body("plain"), headers=plain, timeout=30).status_code == 200
        # A compressed body is inflated by the lane, and traced as a plain one.
        gzipped = gzip.compress(_body("gzipped"))
        headers = {"Content-Encoding": "gzip", **plain}
        assert requests.post(url, data=gzipped, headers=headers, timeout=30).status_code == 200
        answered = time.monotonic_ns()
        assert server.stop() == 0
        # HTTP_SEND_END is read once the bytes are handed to the socket: a preempted server
        # reads it after the client has its answer. Every stamp precedes the server's exit.
        after = time.monotonic_ns()
    traces = _traces(trace_file)
    assert set(traces) == {"plain", "gzipped"}
    for trace in traces.values():
        assert trace.pop("INFER_RESPONSE_COMPLETE") == trace["REQUEST_END"]
        assert list(trace) == _ORDER
        stamps = [trace[name] for name in _ORDER]
        assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= after
        assert trace["HTTP_SEND_START"] <= answered  # read before the bytes were sent
    assert traces["plain"]["REQUEST_END"] < traces["gzipped"]["REQUEST_START"]


def test_settings_changed_at_run_time(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    trace_file = tmp_path / "trace.json"
    flags = ["--trace-config", f"triton,file={trace_file}"]  # level OFF: nothing traced
    with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
        url = server.url + "/v2/models/add_sub/infer"
        setting = server.url + "/v2/models/add_sub/trace/setting"
        assert requests.post(url, data=_body("before"), timeout=30).status_code == 200
        body = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2"}
        reply = requests.post(setting, json=body, timeout=10)
        assert reply.json()["trace_level"] == ["TIMESTAMPS"]
        for name in ("one", "two", "three"):
            assert requests.post(url, data=_body(name), timeout=30).status_code == 200
        assert requests.get(setting, timeout=10).json()["trace_count"] == "0"
        # The global setting is still OFF: clearing the model's override stops it all.
        requests.post(setting, json={"trace_level": None, "trace_count": None}, timeout=10)
        requests.post(setting, json={"trace_rate": "1", "trace_count": "5"}, timeout=10)
        assert requests.post(url, data=_body("off"), timeout=30).status_code == 200
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert client.get_trace_settings("add_sub")["trace_level"] == ["OFF"]
        data = np.ones((1, 16), np.float32)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        client.infer("add_sub", inputs, request_id="still-off")
        client.close()
        assert server.stop() == 0
    # trace_count 2 with log_frequency 0 and rate 1: written as trace.json.0 when the
    # count is used up, as Triton does.
    chunk = trace_file.parent / "trace.json.0"
    assert set(_traces(chunk)) == {"one", "two"}
    assert not trace_file.exists()


def _tensor_records(trace_file) -> dict:
    """request id -> sorted [(activity, tensor)] of each trace with a model record."""
    records = json.loads(trace_file.read_text())
    request_of = {r["id"]: r["request_id"] for r in records if "model_name" in r}
    out: dict = {}
    for record in records:
        if "activity" in record and record["id"] in request_of:
            out.setdefault(request_of[record["id"]], []).append(
                (record["activity"], record["tensor"])
            )
    return {k: sorted(v, key=lambda item: (item[0], item[1]["name"])) for k, v in out.items()}


def test_tensors_level_writes_each_tensor_on_lanes_and_general_path(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    trace_file = tmp_path / "trace.json"
    flags = ["--trace-config", f"triton,file={trace_file}", "--trace-config", "rate=1"]
    flags += ["--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS"]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16) / 3)
        inputs[1].set_data_from_numpy(np.full((1, 16), 0.5, np.float32))
        client.infer("add_sub", inputs, request_id="lane")  # binary: the lane
        client.close()
        gzipped = gzip.compress(_body("general"))
        url = server.url + "/v2/models/add_sub/infer"
        reply = requests.post(url, data=gzipped, headers={"Content-Encoding": "gzip"}, timeout=30)
        assert reply.status_code == 200
        # TENSORS alone: the tensors without the timestamps or the model's record.
        reply = requests.post(server.url + "/v2/trace/setting", json={"trace_level": ["TENSORS"]})
        assert reply.json()["trace_level"] == ["TENSORS"]
        reply = requests.post(url, data=_body("alone"), headers={"Accept-Encoding": "identity"})
        assert reply.status_code == 200
        assert server.stop() == 0
    thirds = np.arange(16, dtype=np.float32) / 3  # as the client sent them

    def text(values) -> str:  # a C++ stream's float32 text: %g
        return ",".join(f"{v:g}" for v in values)

    def tensor(name, data):
        return {"name": name, "data": data, "shape": "1,16", "dtype": "FP32"}

    traces = _tensor_records(trace_file)
    assert text(thirds[:4]) == "0,0.333333,0.666667,1"
    assert traces["lane"] == [
        ("TENSOR_BACKEND_OUTPUT", tensor("OUTPUT0", text(thirds + np.float32(0.5)))),
        ("TENSOR_BACKEND_OUTPUT", tensor("OUTPUT1", text(thirds - np.float32(0.5)))),
        ("TENSOR_QUEUE_INPUT", tensor("INPUT0", text(thirds))),
        ("TENSOR_QUEUE_INPUT", tensor("INPUT1", ",".join(["0.5"] * 16))),
    ]
    counting = ",".join(str(i) for i in range(16))
    assert traces["general"] == [
        ("TENSOR_BACKEND_OUTPUT", tensor("OUTPUT0", ",".join(str(2 * i) for i in range(16)))),
        ("TENSOR_BACKEND_OUTPUT", tensor("OUTPUT1", ",".join(["0"] * 16))),
        ("TENSOR_QUEUE_INPUT", tensor("INPUT0", counting)),
        ("TENSOR_QUEUE_INPUT", tensor("INPUT1", counting)),
    ]
    records = json.loads(trace_file.read_text())
    alone = [r for r in records if r["id"] not in {x["id"] for x in records if "model_name" in x}]
    assert {tuple(sorted(r)) for r in alone} == {("activity", "id", "tensor")}
    assert sorted(r["tensor"]["name"] for r in alone) == ["INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1"]
