"""The trace extension against the real Triton 2.51 (where installed, tests/triton_peer.py):
the same setting requests (HTTP and gRPC TraceSetting) get the same answers, and the
same infer requests leave trace files of the same shape (records, fields, timestamp
names; the values differ). Naiad's own checks of the timestamps are in test_trace.py."""

from __future__ import annotations

import gzip
import json
import signal

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]


def _flags(trace_file, *more):
    return ["--trace-config", f"triton,file={trace_file}", *more]


# (method, path, body) in order, each sent to both servers; the model is add_sub.
_STEPS = [
    ("GET", "/v2/trace/setting", None),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/trace/setting", '{"trace_rate":"5"}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":5}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":"abc"}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":"-1"}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":"0"}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":"99999999999"}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":" 3x"}'),
    ("POST", "/v2/trace/setting", '{"trace_level":"TIMESTAMPS"}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["TENSORS"]}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["TIMESTAMPS","TENSORS"]}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["BOGUS"]}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["OFF","TIMESTAMPS"]}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["TIMESTAMPS",3]}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["OFF"]}'),
    ("POST", "/v2/trace/setting", '{"trace_count":"-5"}'),
    ("POST", "/v2/trace/setting", '{"trace_count":"abc"}'),
    ("POST", "/v2/trace/setting", '{"trace_count":"10"}'),
    ("POST", "/v2/trace/setting", '{"log_frequency":"-1"}'),
    ("POST", "/v2/trace/setting", '{"log_frequency":"3"}'),
    ("POST", "/v2/trace/setting", '{"trace_file":"/tmp/elsewhere.json"}'),
    ("POST", "/v2/trace/setting", '{"trace_mode":"opentelemetry","bogus":"1"}'),
    ("POST", "/v2/trace/setting", "xyz"),
    ("POST", "/v2/trace/setting", ""),
    ("POST", "/v2/trace/setting", "[]"),
    ("POST", "/v2/trace/setting", '{"trace_rate":null,"trace_count":null,"trace_level":null}'),
    ("POST", "/v2/trace/setting", '{"trace_rate":"7"}'),
    ("POST", "/v2/models/add_sub/trace/setting", '{"trace_rate":"3","trace_level":["TENSORS"]}'),
    ("POST", "/v2/trace/setting", '{"trace_count":"9","trace_rate":"11"}'),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("POST", "/v2/models/add_sub/trace/setting", '{"trace_rate":null}'),
    ("POST", "/v2/models/add_sub/trace/setting", '{"trace_file":"/tmp/m.json"}'),
    ("POST", "/v2/models/add_sub/trace/setting", '{"trace_level":null}'),
    ("POST", "/v2/trace/setting", '{"trace_level":["TIMESTAMPS"]}'),
    ("GET", "/v2/models/add_sub/trace/setting", None),
    ("GET", "/v2/models/nosuch/trace/setting", None),
    ("POST", "/v2/models/nosuch/trace/setting", '{"trace_rate":"3"}'),
    ("GET", "/v2/models/add_sub/versions/1/trace/setting", None),
    ("PUT", "/v2/trace/setting", None),
    ("DELETE", "/v2/models/add_sub/trace/setting", None),
    ("GET", "/v2/trace/settings", None),
]


def _http_answers(url: str, trace_file: str) -> list:
    answers = []
    for method, path, body in _STEPS:
        reply = requests.request(method, url + path, data=body, timeout=30)
        answers.append(
            ((method, path, body), reply.status_code, reply.text.replace(trace_file, "F"))
        )
    return answers


def _grpc_answers(url: str, trace_file: str) -> list:
    client = grpcclient.InferenceServerClient(url)
    steps = [
        ("", {}),
        ("", {"trace_rate": "4", "trace_level": ["TIMESTAMPS", "TENSORS"]}),
        ("", {"trace_rate": "x"}),
        ("", {"trace_count": "-3"}),
        ("", {"trace_count": "2147483648"}),
        ("", {"trace_rate": ["1", "2"]}),
        ("", {"trace_level": ["OFF", "TENSORS"]}),
        ("", {"trace_file": "/tmp/x"}),
        ("add_sub", {"log_frequency": "2"}),
        ("add_sub", {"trace_rate": None}),
        ("add_sub", {"log_frequency": None}),
        ("nosuch", {}),
    ]
    answers = []
    for model, settings in steps:
        try:
            got = client.update_trace_settings(model, settings, as_json=True)
            answers.append((model, settings, "ok", json.dumps(got, sort_keys=True)))
        except grpcclient.InferenceServerException as exc:
            answers.append((model, settings, exc.status(), exc.message()))
    client.close()
    return [tuple(str(x).replace(trace_file, "F") for x in answer) for answer in answers]


def test_settings_answer_as_triton(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    triton_file = str(tmp_path / "triton_trace.json")
    naiad_file = str(tmp_path / "naiad_trace.json")
    flags = ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=2"]
    with TritonPeer(repository, tmp_path, _flags(triton_file, *flags)) as triton:
        theirs = _http_answers(triton.url, triton_file)
        theirs_grpc = _grpc_answers(f"127.0.0.1:{triton.grpc_port}", triton_file)
    with NaiadServer(repository, log_dir=tmp_path, extra_args=_flags(naiad_file, *flags)) as naiad:
        ours = _http_answers(naiad.url, naiad_file)
        ours_grpc = _grpc_answers(f"127.0.0.1:{naiad.grpc_port}", naiad_file)
    for (step, code_t, text_t), (_s, code_n, text_n) in zip(theirs, ours):
        assert (code_n, text_n) == (code_t, text_t), step
    for mine, theirs_one in zip(ours_grpc, theirs_grpc):
        assert mine == theirs_one


def _infer_both_protocols(http_port: int, grpc_port: int) -> None:
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    client.infer("add_sub", inputs, request_id="http-1")
    client.close()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    client.infer("add_sub", inputs, request_id="grpc-1")
    client.close()


def _shape(records: list) -> dict:
    """Per trace (by request id): its records' field sets and timestamp names, sorted."""
    by_id: dict = {}
    for record in records:
        by_id.setdefault(record["id"], []).append(record)
    out = {}
    for trace in by_id.values():
        model = next(r for r in trace if "model_name" in r)
        fields = sorted(tuple(sorted(r)) for r in trace)
        names = sorted(t["name"] for r in trace for t in r.get("timestamps", []))
        types = {k: type(v).__name__ for r in trace for k, v in r.items() if k != "timestamps"}
        stamp_types = {type(t["ns"]).__name__ for r in trace for t in r.get("timestamps", [])}
        out[model["request_id"]] = (fields, names, types, stamp_types, model["model_version"])
    return out


def test_trace_file_has_the_shape_of_triton(tmp_path):
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    triton_file = tmp_path / "triton_trace.json"
    naiad_file = tmp_path / "naiad_trace.json"
    flags = ["--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"]
    with TritonPeer(repository, tmp_path, _flags(triton_file, *flags)) as triton:
        _infer_both_protocols(triton.http_port, triton.grpc_port)
        triton.process.send_signal(signal.SIGTERM)
        triton.process.wait(60)
    server = NaiadServer(repository, log_dir=tmp_path, extra_args=_flags(naiad_file, *flags))
    with server:
        _infer_both_protocols(server.http_port, server.grpc_port)
        assert server.stop() == 0
    theirs = _shape(json.loads(triton_file.read_text()))
    ours = _shape(json.loads(naiad_file.read_text()))
    assert set(ours) == {"http-1", "grpc-1"}
    assert ours == theirs


def _chunks(trace_file) -> list:
    """[(file suffix, request ids in it)] of the indexed trace files, in index order."""
    out = []
    index = 0
    while (path := trace_file.parent / f"{trace_file.name}.{index}").exists():
        records = json.loads(path.read_text())
        out.append((index, [r["request_id"] for r in records if "model_name" in r]))
        index += 1
    return out


def _ten_requests(http_port: int) -> None:
    data = np.ones((1, 16), dtype=np.float32)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    for i in range(10):
        client.infer("add_sub", inputs, request_id=f"r{i}")
    client.close()


def test_rate_count_and_log_frequency_as_triton(tmp_path):
    """trace_rate 2, trace_count 3, log_frequency 2: the 2nd, 4th and 6th requests are
    traced, in trace_file.0 (two) and trace_file.1 (the last, written at shutdown)."""
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    flags = [
        "--trace-config",
        "level=TIMESTAMPS",
        "--trace-config",
        "rate=2",
        "--trace-config",
        "count=3",
        "--trace-config",
        "triton,log-frequency=2",
    ]
    triton_file = tmp_path / "t" / "trace.json"
    naiad_file = tmp_path / "n" / "trace.json"
    triton_file.parent.mkdir()
    naiad_file.parent.mkdir()
    with TritonPeer(repository, tmp_path, _flags(triton_file, *flags)) as triton:
        _ten_requests(triton.http_port)
        after = requests.get(triton.url + "/v2/trace/setting", timeout=10).json()
        triton.process.send_signal(signal.SIGTERM)
        triton.process.wait(60)
    server = NaiadServer(repository, log_dir=tmp_path, extra_args=_flags(naiad_file, *flags))
    with server:
        _ten_requests(server.http_port)
        ours_after = requests.get(server.url + "/v2/trace/setting", timeout=10).json()
        assert server.stop() == 0
    assert _chunks(naiad_file) == _chunks(triton_file) == [(0, ["r1", "r3"]), (1, ["r5"])]
    assert ours_after["trace_count"] == after["trace_count"] == "0"
    assert not naiad_file.exists() and not triton_file.exists()


def _tensor_requests(http_port: int, grpc_port: int) -> None:
    """Requests to trace_types (JSON, on the lane; FP16 binary) and add_sub (gRPC, and
    a compressed body)."""
    url = f"http://127.0.0.1:{http_port}"
    inputs = [
        {"name": "IN_BOOL", "datatype": "BOOL", "shape": [1, 2], "data": [True, False]},
        {"name": "IN_UINT8", "datatype": "UINT8", "shape": [1, 3], "data": [65, 66, 122]},
        {"name": "IN_INT8", "datatype": "INT8", "shape": [1, 2], "data": [97, 67]},
        {"name": "IN_UINT64", "datatype": "UINT64", "shape": [1, 1], "data": [2**64 - 1]},
        {"name": "IN_INT16", "datatype": "INT16", "shape": [1, 2], "data": [-7, 9]},
        {
            "name": "IN_FP32",
            "datatype": "FP32",
            "shape": [1, 4],
            "data": [1e-7, 123456789, 0.1, -2.5],
        },
        {
            "name": "IN_FP64",
            "datatype": "FP64",
            "shape": [1, 3],
            "data": [3.141592653589793, 1e300, -0.0],
        },
        {"name": "IN_STRING", "datatype": "BYTES", "shape": [1, 2], "data": ["hello", "wor ld"]},
    ]
    outputs = [{"name": n} for n in ("OUT_BOOL", "OUT_UINT8", "OUT_STRING", "OUT_FP64")]
    body = {"id": "types", "inputs": inputs, "outputs": outputs}
    plain = {"Accept-Encoding": "identity"}
    reply = requests.post(
        f"{url}/v2/models/trace_types/infer", json=body, headers=plain, timeout=30
    )
    assert reply.status_code == 200, reply.text
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    half = httpclient.InferInput("IN_FP16", [1, 2], "FP16")
    half.set_data_from_numpy(np.array([[1.5, 2]], np.float16))
    client.infer("trace_types", [half], request_id="fp16")
    client.close()
    data = np.arange(16, dtype=np.float32).reshape(1, 16) / 7
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    tensors = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    client.infer("add_sub", tensors, request_id="grpc")
    client.close()
    doc = {
        "id": "compressed",
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 16], "data": [i / 9 for i in range(16)]}
            for n in ("INPUT0", "INPUT1")
        ],
    }
    gzipped = gzip.compress(json.dumps(doc).encode())
    reply = requests.post(
        f"{url}/v2/models/add_sub/infer",
        data=gzipped,
        headers={"Content-Encoding": "gzip", **plain},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text


def _tensors(records: list) -> dict:
    """Per trace (by request id): its tensor records, sorted (Triton writes a request's
    inputs in its own hash order)."""
    request_of = {r["id"]: r["request_id"] for r in records if "model_name" in r}
    out: dict = {}
    for record in records:
        if "activity" in record:
            out.setdefault(request_of[record["id"]], []).append(
                json.dumps([record["activity"], record["tensor"]], sort_keys=True)
            )
    return {k: sorted(v) for k, v in out.items()}


def test_tensor_traces_as_triton(tmp_path):
    """Level TIMESTAMPS and TENSORS: the same tensor records, field by field and value
    by value, for every datatype the Python backend takes, on each path."""
    repository = make_repository(tmp_path / "repo", ["add_sub", "trace_types"])
    triton_file = tmp_path / "triton_trace.json"
    naiad_file = tmp_path / "naiad_trace.json"
    flags = ["--trace-config", "level=TIMESTAMPS", "--trace-config", "level=TENSORS"]
    flags += ["--trace-config", "rate=1"]
    with TritonPeer(repository, tmp_path, _flags(triton_file, *flags)) as triton:
        _tensor_requests(triton.http_port, triton.grpc_port)
        triton.process.send_signal(signal.SIGTERM)
        triton.process.wait(60)
    server = NaiadServer(repository, log_dir=tmp_path, extra_args=_flags(naiad_file, *flags))
    with server:
        _tensor_requests(server.http_port, server.grpc_port)
        assert server.stop() == 0
    theirs = json.loads(triton_file.read_text())
    ours = json.loads(naiad_file.read_text())
    assert set(_tensors(ours)) == {"types", "fp16", "grpc", "compressed"}
    assert _tensors(ours) == _tensors(theirs)
    # Every request is the lanes' now (a compressed body's and JSON with BYTES included):
    # each trace has Triton's whole shape, the front end's HTTP timestamps with it.
    shape_ours, shape_theirs = _shape(ours), _shape(theirs)
    for lane in ("types", "fp16", "grpc", "compressed"):
        assert shape_ours[lane] == shape_theirs[lane], lane
