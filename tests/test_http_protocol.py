"""The HTTP front end in-process, against a fake model manager, driven like a user would:
raw sockets, `requests` and `tritonclient.http`. Expected status codes and error bodies are
the ones the real Triton 2.51 answers for the same requests.

The fake's own answers (model metadata, config, statistics, its NotFound texts) are not
Naiad's: what a real server says for those is checked at the end of this file against a
`naiad serve` with a small repository, and in test_server_http.py."""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import socket
import struct
import threading
import time

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import uvloop
from naiad.errors import NotFound
from naiad.http import start_http_server
from naiad.protos import model_config_pb2 as mc
from naiad.types import InferResponse, OutputTensor
from naiad.validation import RequestValidator
from server_harness import NaiadServer, make_repository
from tritonclient.utils import InferenceServerException

# ---------------------------------------------------------------------------------------------
# A fake manager with a few models


def _config(name, max_batch, inputs, outputs):
    config = mc.ModelConfig(name=name, max_batch_size=max_batch, backend="python")
    for iname, dtype, dims, *optional in inputs:
        config.input.add(name=iname, data_type=dtype, dims=dims, optional=bool(optional))
    for oname, dtype, dims in outputs:
        config.output.add(name=oname, data_type=dtype, dims=dims)
    return config


def _wire(config_type):
    return mc.DataType.Name(config_type)[5:].replace("STRING", "BYTES")


class FakeModel:
    def __init__(self, config, compute, delay=0.0):
        self.name = config.name
        self.version = 1
        self.config = config
        self.compute = compute
        self.delay = delay
        self.validator = RequestValidator(config, config.name, 1)
        self.seen = []

    def metadata(self):
        batch = [-1] if self.config.max_batch_size > 0 else []
        return {
            "name": self.name,
            "versions": ["1"],
            "platform": "python",
            "inputs": [
                {"name": i.name, "datatype": _wire(i.data_type), "shape": batch + list(i.dims)}
                for i in self.config.input
            ],
            "outputs": [
                {"name": o.name, "datatype": _wire(o.data_type), "shape": batch + list(o.dims)}
                for o in self.config.output
            ],
        }

    def config_json(self):
        return {"name": self.name, "max_batch_size": self.config.max_batch_size}

    def submit(self, request):
        """As LoadedModel.submit: an invalid request raises at once; the future resolves
        to the response."""
        self.validator.validate(request)
        self.seen.append(request)
        return asyncio.ensure_future(self._run(request))

    async def _run(self, request):
        arrays = {}
        for t in request.inputs:
            if t.datatype == "BYTES":
                arrays[t.name] = bytes(t.data)
            else:
                dtype = (
                    np.bool_
                    if t.datatype == "BOOL"
                    else np.dtype(t.datatype.lower().replace("fp", "float"))
                )
                arrays[t.name] = np.frombuffer(t.data, dtype=dtype).reshape(t.shape)
        delay = self.delay
        if "DELAY" in request.parameters:
            delay = request.parameters["DELAY"]
        if delay:
            await asyncio.sleep(delay)
        outputs = self.compute(arrays, request)
        wanted = {o.name for o in request.outputs} if request.outputs else None
        return InferResponse(
            self.name,
            "1",
            request.id,
            [o for o in outputs if wanted is None or o.name in wanted],
        )


def _addsub(arrays, request):
    a, b = arrays["INPUT0"], arrays["INPUT1"]
    return [
        OutputTensor("OUTPUT0", "FP32", list(a.shape), (a + b).astype(np.float32).tobytes()),
        OutputTensor("OUTPUT1", "FP32", list(a.shape), (a - b).astype(np.float32).tobytes()),
    ]


def _identity_bytes(arrays, request):
    shape = request.inputs[0].shape
    return [OutputTensor("OUTPUT0", "BYTES", shape, arrays["INPUT0"])]


def _nobatch(arrays, request):
    h, b = arrays["H"], arrays["B"]
    return [
        OutputTensor("HO", "FP16", list(h.shape), h.tobytes()),
        OutputTensor("BO", "BOOL", list(b.shape), b.tobytes()),
    ]


def fake_not_found(name, version=""):
    return f"fake manager: no {name!r} version {version or 'any'}"


class FakeManager:
    def __init__(self):
        self.live = True
        self.ready = True
        self.models = {
            "addsub": FakeModel(
                _config(
                    "addsub",
                    64,
                    [("INPUT0", mc.TYPE_FP32, [16]), ("INPUT1", mc.TYPE_FP32, [16])],
                    [("OUTPUT0", mc.TYPE_FP32, [16]), ("OUTPUT1", mc.TYPE_FP32, [16])],
                ),
                _addsub,
            ),
            "identity_bytes": FakeModel(
                _config(
                    "identity_bytes",
                    8,
                    [("INPUT0", mc.TYPE_STRING, [-1])],
                    [("OUTPUT0", mc.TYPE_STRING, [-1])],
                ),
                _identity_bytes,
            ),
            "nobatch": FakeModel(
                _config(
                    "nobatch",
                    0,
                    [
                        ("H", mc.TYPE_FP16, [2, 2]),
                        ("B", mc.TYPE_BOOL, [-1]),
                        ("OPT", mc.TYPE_INT32, [1], True),
                    ],
                    [("HO", mc.TYPE_FP16, [2, 2]), ("BO", mc.TYPE_BOOL, [-1])],
                ),
                _nobatch,
            ),
        }

    def server_live(self):
        return self.live

    def server_ready(self):
        return self.ready

    def server_metadata(self):
        return {"name": "naiad", "version": "0.1.0", "extensions": ["binary_tensor_data"]}

    def get(self, name, version=""):
        # Deliberately not Triton's wording: the router passes the manager's message on,
        # and the real manager's texts are checked against a real server below.
        model = self.models.get(name)
        if model is None or version not in ("", "1"):
            raise NotFound(fake_not_found(name, version))
        return model

    def model_ready(self, name, version=""):
        return name in self.models and version in ("", "1")

    def statistics(self, name="", version=""):
        if name:
            self.get(name, version)
        names = [name] if name else sorted(self.models)
        return {"model_stats": [{"name": n, "version": "1", "inference_count": 0} for n in names]}


# ---------------------------------------------------------------------------------------------
# The server on its own loop in a thread


class ServerThread:
    def __init__(self, manager, loop_kind="asyncio", **kwargs):
        self.manager = manager
        self.loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            start_http_server(manager, "127.0.0.1", 0, **kwargs), self.loop
        ).result(10)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        async def stop():
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def server(request):
    srv = ServerThread(FakeManager(), request.param, max_body_size=4 << 20)
    yield srv
    srv.close()


@pytest.fixture()
def session():
    with requests.Session() as s:
        yield s


def _addsub_json(**extra):
    doc = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [1] * 16},
        ]
    }
    doc.update(extra)
    return doc


def _raw(port, data, timeout=3.0, until_close=True, expect_responses=None):
    """Send raw bytes; read until the server closes (or `expect_responses` replies arrived)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(timeout)
        s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                out += b"<EOF>"
                break
            out += chunk
            if expect_responses is not None and out.count(b"HTTP/1.1 ") >= expect_responses:
                if _complete(out, expect_responses):
                    break
        return out


def _complete(out, count):
    rest = out
    for _ in range(count):
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        if len(rest) < length:
            return False
        rest = rest[length:]
    return True


def _split_responses(out):
    """Parse raw HTTP/1.1 responses: list of (status, headers dict, body)."""
    replies = []
    rest = out.replace(b"<EOF>", b"")
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode()] = v.strip().decode()
        length = int(headers.get("content-length", "0"))
        replies.append((status, headers, rest[:length]))
        rest = rest[length:]
    return replies


# ---------------------------------------------------------------------------------------------
# Health, metadata, routing


def test_health_live_and_ready(server, session):
    r = session.get(server.url + "/v2/health/live")
    assert (r.status_code, r.content) == (200, b"")
    r = session.get(server.url + "/v2/health/ready")
    assert (r.status_code, r.content) == (200, b"")
    server.manager.ready = False
    try:
        r = session.get(server.url + "/v2/health/ready")
        assert (r.status_code, r.content) == (400, b"")
    finally:
        server.manager.ready = True


def test_server_metadata_is_the_managers(server, session):
    # What a real server lists: test_server_http.py::test_server_metadata.
    r = session.get(server.url + "/v2")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    assert r.json() == server.manager.server_metadata()


def test_model_routes_reach_the_manager(server, session):
    """Each model path asks the manager for the model and version it names and answers
    with what it returned. The real contents (metadata, config, statistics) are checked
    against a real server in test_server_http.py (test_model_metadata, test_model_config,
    test_statistics_move)."""
    addsub = server.manager.models["addsub"]
    for path in ("/v2/models/addsub", "/v2/models/addsub/versions/1"):
        r = session.get(server.url + path)
        assert (r.status_code, r.headers["Content-Type"]) == (200, "application/json")
        assert r.json() == addsub.metadata()
    for path in ("/v2/models/addsub/config", "/v2/models/addsub/versions/1/config"):
        assert session.get(server.url + path).json() == addsub.config_json()
    r = session.get(server.url + "/v2/models/addsub/ready")
    assert (r.status_code, r.content) == (200, b"")
    r = session.get(server.url + "/v2/models/addsub/stats")
    assert r.json() == server.manager.statistics("addsub")
    r = session.get(server.url + "/v2/models/stats")
    assert r.json() == server.manager.statistics()


def test_manager_not_found_is_404_with_its_message(server, session):
    """The router answers the manager's NotFound with 404 and the manager's message; the
    real manager's wording, Triton's, is checked in test_real_manager_texts below."""
    for path in ("/v2/models/nope", "/v2/models/nope/config", "/v2/models/addsub/versions/2"):
        r = session.get(server.url + path)
        version = "2" if "versions" in path else ""
        name = "addsub" if version else "nope"
        assert (r.status_code, r.json()) == (404, {"error": fake_not_found(name, version)})
    r = session.post(server.url + "/v2/models/addsub/versions/2/infer", json=_addsub_json())
    assert (r.status_code, r.json()) == (404, {"error": fake_not_found("addsub", "2")})
    r = session.post(server.url + "/v2/models/addsub/versions/1/infer", json=_addsub_json())
    assert r.status_code == 200


@pytest.mark.parametrize(
    "path,status,body",
    [
        # The router's own texts (the manager's NotFound texts: test_real_manager_texts).
        ("/v2/models/nope/ready", 400, {"error": "Model version not ready"}),
        ("/v2/models/addsub/versions/2/ready", 400, {"error": "Model version not ready"}),
        ("/v2/models/nope/stats", 400, {"error": "requested model 'nope' is not available"}),
        (
            "/v2/models/addsub/versions/2/stats",
            400,
            {"error": "requested model version is not available for model 'addsub'"},
        ),
        ("/v2/foo", 404, {"error": "Not Found"}),
        ("/foo", 404, {"error": "Not Found"}),
        ("/v2/", 404, {"error": "Not Found"}),
        ("/v2/models/addsub/", 404, {"error": "Not Found"}),
        ("/v2/models/addsub/foo", 404, {"error": "Not Found"}),
        ("/v2/models/addsub/versions/abc", 404, {"error": "Not Found"}),
        ("/v2/health/foo", 404, {"error": "Not Found"}),
    ],
)
def test_get_errors(server, session, path, status, body):
    r = session.get(server.url + path)
    assert r.status_code == status
    assert r.json() == body


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/v2/health/live"),
        ("POST", "/v2"),
        ("PUT", "/v2/models/addsub"),
        ("POST", "/v2/models/addsub"),
        ("GET", "/v2/models/addsub/infer"),
        ("DELETE", "/v2/models/addsub/ready"),
        ("POST", "/v2/models/addsub/stats"),
    ],
)
def test_wrong_method_is_405(server, session, method, path):
    r = session.request(method, server.url + path)
    assert r.status_code == 405
    assert r.json() == {"error": "Method Not Allowed"}


def test_head_is_405_without_body(server):
    out = _raw(
        server.port, b"HEAD /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    assert out.startswith(b"HTTP/1.1 405 Method Not Allowed\r\n")
    assert out.endswith(b"\r\n\r\n<EOF>")


def test_query_string_is_ignored(server, session):
    assert session.get(server.url + "/v2/health/live?verbose=1").status_code == 200


# ---------------------------------------------------------------------------------------------
# Inference with requests


def test_infer_json(server, session):
    r = session.post(server.url + "/v2/models/addsub/infer", json=_addsub_json(id="abc"))
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    doc = r.json()
    assert doc["id"] == "abc" and doc["model_name"] == "addsub" and doc["model_version"] == "1"
    out = {o["name"]: o for o in doc["outputs"]}
    assert out["OUTPUT0"]["datatype"] == "FP32" and out["OUTPUT0"]["shape"] == [1, 16]
    assert out["OUTPUT0"]["data"] == [float(i + 1) for i in range(16)]
    assert out["OUTPUT1"]["data"] == [float(i - 1) for i in range(16)]


def test_infer_json_without_id_has_no_id(server, session):
    r = session.post(server.url + "/v2/models/addsub/infer", json=_addsub_json())
    assert "id" not in r.json()


def test_infer_binary_in_and_out(server, session):
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.float32)
    header = {
        "id": "bin",
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [2, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": a.nbytes},
            },
            {
                "name": "INPUT1",
                "shape": [2, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": b.nbytes},
            },
        ],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": True}}, {"name": "OUTPUT0"}],
    }
    h = json.dumps(header).encode()
    r = session.post(
        server.url + "/v2/models/addsub/infer",
        data=h + a.tobytes() + b.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(h))},
    )
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/octet-stream"
    hl = int(r.headers["Inference-Header-Content-Length"])
    doc = json.loads(r.content[:hl])
    out = {o["name"]: o for o in doc["outputs"]}
    assert out["OUTPUT1"]["parameters"] == {"binary_data_size": 128}
    assert "data" not in out["OUTPUT1"]
    np.testing.assert_array_equal(
        np.frombuffer(r.content[hl:], dtype=np.float32).reshape(2, 16), a - b
    )
    assert out["OUTPUT0"]["data"] == (a + b).reshape(-1).tolist()
    # The binary segments reached the model as views of the request body, not copies.
    seen = server.manager.models["addsub"].seen[-1]
    assert isinstance(seen.inputs[0].data, memoryview)


def test_infer_binary_data_output_parameter(server, session):
    r = session.post(
        server.url + "/v2/models/addsub/infer",
        json=_addsub_json(parameters={"binary_data_output": True}),
    )
    hl = int(r.headers["Inference-Header-Content-Length"])
    doc = json.loads(r.content[:hl])
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [64, 64]
    assert len(r.content) == hl + 128


def test_infer_bytes_json_roundtrip(server, session):
    doc = {
        "id": "s",
        "inputs": [
            {"name": "INPUT0", "shape": [1, 3], "datatype": "BYTES", "data": ["abc", "", "héllo"]}
        ],
    }
    r = session.post(server.url + "/v2/models/identity_bytes/infer", json=doc)
    assert r.status_code == 200
    assert r.json()["outputs"] == [
        {"name": "OUTPUT0", "datatype": "BYTES", "shape": [1, 3], "data": ["abc", "", "héllo"]}
    ]
    doc["outputs"] = [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]
    r = session.post(server.url + "/v2/models/identity_bytes/infer", json=doc)
    hl = int(r.headers["Inference-Header-Content-Length"])
    assert r.content[hl:] == b"\x03\x00\x00\x00abc\x00\x00\x00\x00\x06\x00\x00\x00h\xc3\xa9llo"


def test_infer_classification(server, session):
    r = session.post(
        server.url + "/v2/models/addsub/infer",
        json=_addsub_json(outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}]),
    )
    assert r.json()["outputs"] == [
        {
            "name": "OUTPUT0",
            "datatype": "BYTES",
            "shape": [1, 2],
            "data": ["16.000000:15", "15.000000:14"],
        }
    ]


def test_infer_fp16_json_output_is_rejected_like_triton(server, session):
    h16 = np.array([[1.5, 2], [3, 4]], dtype=np.float16)
    header = {
        "inputs": [
            {
                "name": "H",
                "shape": [2, 2],
                "datatype": "FP16",
                "parameters": {"binary_data_size": 8},
            },
            {"name": "B", "shape": [3], "datatype": "BOOL", "data": [True, False, True]},
        ]
    }
    h = json.dumps(header).encode()
    r = session.post(
        server.url + "/v2/models/nobatch/infer",
        data=h + h16.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(h))},
    )
    assert r.status_code == 400
    assert r.json() == {
        "error": "sending FP16 data via JSON is not supported. Please use the "
        "binary data format for output"
    }
    header["outputs"] = [{"name": "HO", "parameters": {"binary_data": True}}, {"name": "BO"}]
    h = json.dumps(header).encode()
    r = session.post(
        server.url + "/v2/models/nobatch/infer",
        data=h + h16.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(h))},
    )
    assert r.status_code == 200
    hl = int(r.headers["Inference-Header-Content-Length"])
    doc = json.loads(r.content[:hl])
    assert doc["outputs"][1] == {
        "name": "BO",
        "datatype": "BOOL",
        "shape": [3],
        "data": [True, False, True],
    }
    np.testing.assert_array_equal(np.frombuffer(r.content[hl:], np.float16).reshape(2, 2), h16)


def _bin_addsub(a_bytes, b_bytes, sizes=(64, 64)):
    header = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": sizes[0]},
            },
            {
                "name": "INPUT1",
                "shape": [1, 16],
                "datatype": "FP32",
                "parameters": {"binary_data_size": sizes[1]},
            },
        ]
    }
    h = json.dumps(header).encode()
    return h, h + a_bytes + b_bytes


_A = np.arange(16, dtype=np.float32).tobytes()


def _infer_error_cases():
    def edit(fn, **extra):
        doc = _addsub_json(**extra)
        fn(doc)
        return json.dumps(doc).encode()

    def set_(i, key, value):
        def fn(doc):
            doc["inputs"][i][key] = value

        return fn

    prefix = "[request id: <id_unknown>] "
    h, body_trunc = _bin_addsub(_A, _A[:32])
    _, body_extra = _bin_addsub(_A, _A + b"xx")
    _, body_mismatch = _bin_addsub(_A, _A, sizes=(32, 96))
    many = [0.0] * (65 * 16)
    return [
        (
            "malformed json",
            "addsub",
            b'{"inputs": [',
            {},
            500,
            "failed to parse the request JSON buffer: Invalid value. at 12",
        ),
        (
            "no inputs",
            "addsub",
            b"{}",
            {},
            500,
            "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'",
        ),
        (
            "truncated binary",
            "addsub",
            body_trunc,
            {"Inference-Header-Content-Length": str(len(h))},
            400,
            "unexpected size for input 'INPUT1', expecting 32 additional bytes for model 'addsub'",
        ),
        (
            "extra binary",
            "addsub",
            body_extra,
            {"Inference-Header-Content-Length": str(len(h))},
            400,
            "unexpected additional input data for model 'addsub'",
        ),
        (
            "header length > body",
            "addsub",
            body_trunc,
            {"Inference-Header-Content-Length": "100000"},
            400,
            f"inference header size should be in range (0, {len(body_trunc)}), got: 100000",
        ),
        (
            "binary size mismatch",
            "addsub",
            body_mismatch,
            {"Inference-Header-Content-Length": str(len(h))},
            400,
            f"{prefix}input byte size mismatch for input 'INPUT0' for model 'addsub'. "
            "Expected 64, got 32",
        ),
        (
            "wrong input name",
            "addsub",
            edit(set_(0, "name", "BOGUS")),
            {},
            400,
            "unexpected inference input 'BOGUS' for model 'addsub'",
        ),
        (
            "missing input",
            "addsub",
            edit(lambda d: d["inputs"].pop()),
            {},
            400,
            f"{prefix}expected 2 inputs but got 1 inputs for model 'addsub'. Got input(s) "
            "['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required "
            "input(s).",
        ),
        (
            "wrong datatype",
            "addsub",
            edit(set_(0, "datatype", "INT32")),
            {},
            400,
            f"{prefix}inference input 'INPUT0' data-type is 'INT32', but model 'addsub' expects "
            "'FP32'",
        ),
        (
            "wrong shape",
            "addsub",
            edit(lambda d: d["inputs"][0].update(shape=[1, 8], data=list(range(8)))),
            {},
            400,
            f"{prefix}unexpected shape for input 'INPUT0' for model 'addsub'. Expected [-1,16], "
            "got [1,8]. NOTE: Setting a non-zero max_batch_size in the model config requires a "
            "batch dimension to be prepended to each input shape. If you want to specify the full "
            "shape including the batch dim in your input dims config, try setting max_batch_size "
            "to zero. See the model configuration docs for more info on max_batch_size.",
        ),
        (
            "batch over max",
            "addsub",
            edit(lambda d: [i.update(shape=[65, 16], data=many) for i in d["inputs"]]),
            {},
            400,
            f"{prefix}inference request batch-size must be <= 64 for 'addsub'",
        ),
        (
            "json data too short",
            "addsub",
            edit(set_(0, "data", list(range(15)))),
            {},
            500,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            "json strings into FP32",
            "addsub",
            edit(set_(0, "data", ["a"] * 16)),
            {},
            500,
            "Unable to parse 'data': attempt to access JSON non-number as double",
        ),
        (
            "unknown output",
            "addsub",
            edit(lambda d: d.update(outputs=[{"name": "BOGUS"}])),
            {},
            400,
            "unexpected inference output 'BOGUS' for model 'addsub'",
        ),
        (
            "no data",
            "addsub",
            edit(lambda d: d["inputs"][0].pop("data")),
            {},
            400,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But no field is set",
        ),
        (
            "unknown datatype",
            "addsub",
            edit(set_(0, "datatype", "FOO")),
            {},
            400,
            "invalid datatype for input INPUT0",
        ),
        (
            "id not a string",
            "addsub",
            edit(lambda d: d.update(id=5)),
            {},
            500,
            "Unable to parse 'id': attempt to access JSON non-string as string",
        ),
        (
            "raw request to a 2-input model",
            "addsub",
            b"",
            {},
            400,
            f"{prefix}Raw request must only have 1 input (found 1) to be deduced but got 2 inputs "
            "in 'addsub' model configuration",
        ),
        (
            "bytes count",
            "identity_bytes",
            json.dumps(
                {
                    "id": "s",
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "shape": [1, 3],
                            "datatype": "BYTES",
                            "data": ["abc", "x"],
                        }
                    ],
                }
            ).encode(),
            {},
            400,
            "[request id: s] expected 3 string elements for inference input 'INPUT0' for model "
            "'identity_bytes', got 2",
        ),
        (
            "fp16 via json",
            "nobatch",
            json.dumps(
                {
                    "inputs": [
                        {"name": "H", "shape": [2, 2], "datatype": "FP16", "data": [1, 2, 3, 4]}
                    ]
                }
            ).encode(),
            {},
            400,
            "receiving FP16 data via JSON is not supported. Please use the binary data format for "
            "input H",
        ),
        (
            "unsupported content-encoding",
            "addsub",
            edit(lambda d: None),
            {"Content-Encoding": "br"},
            501,
            "Unsupported compression type",
        ),
    ]


@pytest.mark.parametrize(
    "label,model,body,headers,status,message",
    _infer_error_cases(),
    ids=[c[0] for c in _infer_error_cases()],
)
def test_infer_errors_match_triton(server, session, label, model, body, headers, status, message):
    r = session.post(f"{server.url}/v2/models/{model}/infer", data=body, headers=headers)
    assert r.status_code == status, r.content
    assert r.json() == {"error": message}


def test_gzip_request_body(server, session):
    body = gzip.compress(json.dumps(_addsub_json()).encode())
    r = session.post(
        server.url + "/v2/models/addsub/infer", data=body, headers={"Content-Encoding": "gzip"}
    )
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"][:2] == [1.0, 2.0]


def test_chunked_request_body(server, session):
    payload = json.dumps(_addsub_json()).encode()

    def gen():
        yield payload[:7]
        yield payload[7:50]
        yield payload[50:]

    r = session.post(server.url + "/v2/models/addsub/infer", data=gen())
    assert r.status_code == 200
    assert r.json()["outputs"][1]["data"][:2] == [-1.0, 0.0]


# ---------------------------------------------------------------------------------------------
# tritonclient.http


def test_tritonclient_binary_and_json(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("addsub")
    assert not client.is_model_ready("nope")
    assert client.get_model_metadata("addsub")["name"] == "addsub"
    a = np.random.rand(4, 16).astype(np.float32)
    b = np.random.rand(4, 16).astype(np.float32)
    for binary in (True, False):
        inputs = [
            httpclient.InferInput("INPUT0", [4, 16], "FP32"),
            httpclient.InferInput("INPUT1", [4, 16], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary),
        ]
        result = client.infer("addsub", inputs, outputs=outputs, request_id="r1")
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
        assert result.get_response()["id"] == "r1"
    strings = np.array([[b"x", b"", "ü".encode()]], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    inp.set_data_from_numpy(strings)
    result = client.infer("identity_bytes", [inp])
    assert result.as_numpy("OUTPUT0").tolist() == strings.tolist()
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [inp])
    assert info.value.status() == "404"
    client.close()
    # tritonclient's __del__ uses gevent, which must run on this thread, not wherever a later
    # garbage collection happens to run (e.g. the server's thread).
    del client, info
    gc.collect()


# ---------------------------------------------------------------------------------------------
# HTTP mechanics


def test_keep_alive_and_pipelining_in_order(server):
    slow = json.dumps(_addsub_json(id="slow", parameters={"DELAY": 0.3})).encode()
    fast = json.dumps(_addsub_json(id="fast")).encode()
    data = (
        b"POST /v2/models/addsub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(slow), slow)
        + b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        + b"POST /v2/models/addsub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
        % (len(fast), fast)
        + b"GET /v2/nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    replies = _split_responses(_raw(server.port, data))
    assert [r[0] for r in replies] == [200, 200, 200, 404]
    assert json.loads(replies[0][2])["id"] == "slow"
    assert replies[1][2] == b""
    assert json.loads(replies[2][2])["id"] == "fast"
    assert replies[3][1]["connection"] == "close"


def test_connection_reused_by_requests_session(server, session):
    for _ in range(5):
        assert session.get(server.url + "/v2/health/live").status_code == 200
    # One pooled connection served all of them.
    pool = session.get_adapter(server.url).poolmanager
    assert len(pool.pools) == 1


def test_bad_http_is_400_and_close(server):
    out = _raw(server.port, b"GARBAGE\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b'{"error":"Invalid HTTP request received."}' in out
    assert out.endswith(b"<EOF>")


def test_body_over_limit_is_413_and_close(server):
    out = _raw(
        server.port,
        b"POST /v2/models/addsub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
        % (8 << 20)
        + b"x" * 1000,
    )
    assert out.startswith(b"HTTP/1.1 413 Request Entity Too Large\r\n")
    assert out.endswith(b"<EOF>")
    # Chunked bodies are counted as they arrive.
    chunk = b"x" * (1 << 20)
    data = b"POST /v2/models/addsub/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    data += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5))
    out = _raw(server.port, data)
    assert out.startswith(b"HTTP/1.1 413 ")


def test_expect_100_continue(server):
    body = json.dumps(_addsub_json()).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.settimeout(3)
        s.sendall(
            b"POST /v2/models/addsub/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        assert s.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.sendall(body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")


def test_http10_closes_unless_keep_alive(server):
    out = _raw(server.port, b"GET /v2/health/live HTTP/1.0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b"<EOF>")
    out = _raw(
        server.port, b"GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", timeout=0.5
    )
    assert b"Connection: keep-alive\r\n" in out and not out.endswith(b"<EOF>")


def test_bytes_binary_input_count_errors(server, session):
    def send(segment):
        header = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 3],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(segment)},
                }
            ]
        }
        h = json.dumps(header).encode()
        return session.post(
            server.url + "/v2/models/identity_bytes/infer",
            data=h + segment,
            headers={"Inference-Header-Content-Length": str(len(h))},
        )

    def seg(items):
        return b"".join(struct.pack("<I", len(x)) + x for x in items)

    r = send(seg([b"a", b"bc", b"d", b"e"]))
    assert r.status_code == 400
    assert r.json()["error"] == (
        "[request id: <id_unknown>] unexpected number of string elements 4 for inference input "
        "'INPUT0' for model 'identity_bytes', expecting 3"
    )
    r = send(seg([b"a", b"bc", b"d"]) + b"\x01\x00")
    assert r.status_code == 400
    assert r.json()["error"] == (
        "[request id: <id_unknown>] incomplete string length indicator for inference input "
        "'INPUT0' for model 'identity_bytes', expecting 4 bytes but only 2 bytes available. "
        "Please make sure the string length indicator is in one buffer."
    )
    r = send(seg([b"a", b"bc", b"\xff\xfe"]))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"][:2] == ["a", "bc"]


# ---------------------------------------------------------------------------------------------
# The real manager's texts, through a real `naiad serve`

BROKEN_CONFIG = """\
name: "broken"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""

BROKEN_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken never loads")
"""


@pytest.fixture(scope="module")
def real_server(tmp_path_factory):
    """add_sub, and `broken`, whose initialize() raises, served with --exit-on-error=false."""
    repo = make_repository(tmp_path_factory.mktemp("protocol") / "models", ["add_sub"])
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(BROKEN_CONFIG)
    (repo / "broken" / "1" / "model.py").write_text(BROKEN_MODEL)
    server = NaiadServer(
        repo,
        log_dir=tmp_path_factory.mktemp("protocol-logs"),
        extra_args=["--exit-on-error=false"],
        name="protocol",
    )
    server.start(wait="live", timeout=120)
    yield server
    assert server.stop() == 0


_UNKNOWN = "Request for unknown model: 'nope' is not found"
_VERSION = "Request for unknown model: 'add_sub' version 2 is not found"
_UNLOADED = "Request for unknown model: 'broken' has no available versions"


# What Triton 2.51 answers, with the same repository, for each request. Metadata and infer
# of unknown models and versions are also in test_server_errors.py, and of a model that
# failed to load in test_server_lifecycle.py; config and statistics only here.
@pytest.mark.parametrize(
    "method,path,status,message",
    [
        ("GET", "/v2/models/nope", 404, _UNKNOWN),
        ("GET", "/v2/models/add_sub/versions/2", 404, _VERSION),
        ("GET", "/v2/models/broken", 404, _UNLOADED),
        ("GET", "/v2/models/nope/config", 404, _UNKNOWN),
        ("GET", "/v2/models/add_sub/versions/2/config", 404, _VERSION),
        ("GET", "/v2/models/broken/config", 404, _UNLOADED),
        ("GET", "/v2/models/nope/ready", 400, "Model version not ready"),
        ("GET", "/v2/models/add_sub/versions/2/ready", 400, "Model version not ready"),
        ("GET", "/v2/models/broken/ready", 400, "Model version not ready"),
        ("GET", "/v2/models/nope/stats", 400, "requested model 'nope' is not available"),
        ("GET", "/v2/models/broken/stats", 400, "requested model 'broken' is not available"),
        (
            "GET",
            "/v2/models/add_sub/versions/2/stats",
            400,
            "requested model version is not available for model 'add_sub'",
        ),
        ("POST", "/v2/models/nope/infer", 404, _UNKNOWN),
        ("POST", "/v2/models/add_sub/versions/2/infer", 404, _VERSION),
        ("POST", "/v2/models/broken/infer", 404, _UNLOADED),
    ],
)
def test_real_manager_texts(real_server, method, path, status, message):
    body = json.dumps(_addsub_json()).encode() if method == "POST" else None
    r = requests.request(method, real_server.url + path, data=body, timeout=10)
    assert (r.status_code, r.json()) == (status, {"error": message})
