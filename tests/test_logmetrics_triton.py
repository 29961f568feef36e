"""Differential: the logging extension (HTTP /v2/logging and gRPC LogSettings) and the
metrics page of Naiad against the real Triton 2.51, on the same add_sub repository and the
same flags (`--metrics-config summary_latencies=true`). Skips, saying why, when Triton is
not installed (`make perf-tools`, or /work/shared/peers)."""

from __future__ import annotations

import re
import time

import grpc
import pytest
import requests
from model_control_support import add_sub_json_request
from naiad.protos import grpc_service_pb2 as service_pb2
from naiad.protos import grpc_service_pb2_grpc as service_pb2_grpc
from server_harness import NaiadServer, make_repository
from test_logging_extension import LOGGER_CONFIG, LOGGER_MODEL
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]

ARGS = ["--metrics-config=summary_latencies=true", "--metrics-interval-ms=500"]

# (body) POSTed to /v2/logging in order, each to both servers; every answer (status and
# JSON) must be the same. The sequence changes settings and checks what stayed applied.
HTTP_STEPS = [
    None,  # GET
    "{}",
    '{"log_verbose_level": 2}',
    '{"log_verbose_level": -1}',
    '{"log_verbose_level": "2"}',
    '{"log_verbose_level": 1.5}',
    '{"log_verbose_level": true}',
    '{"log_verbose_level": 4294967297}',
    '{"log_verbose_level": 2147483648}',
    '{"log_verbose_level": 18446744073709551616}',
    '{"log_info": "true"}',
    '{"log_info": 1}',
    '{"log_warning": null}',
    '{"log_format": "ISO8601"}',
    '{"log_format": "iso8601"}',
    '{"log_format": 1}',
    '{"log_file": "/tmp/naiad-never.log"}',
    '{"log_file": null, "log_error": false}',
    '{"log_verbose_level": 3, "log_info": "x"}',
    '{"log_error": true, "log_format": "x", "log_info": false}',
    '{"unknown": 1}',
    "[]",
    "1",
    "",
    "{bad",
    # (Not compared: bodies where orjson stops at another offset than rapidjson, like
    # "notjson" or a trailing comma; the message is the shared http/codec.py's.)
    '{"log_info": true, "log_verbose_level": 0, "log_format": "default"}',
    None,
]

# gRPC LogSettings requests: {name: (SettingValue field, value) or None for an unset one},
# each sent to both; the same status code and message, or the same settings back.
GRPC_STEPS = [
    {},
    {"log_verbose_level": ("uint32_param", 1)},
    {"log_info": ("bool_param", False), "log_format": ("string_param", "ISO8601")},
    {"log_file": ("string_param", "/tmp/naiad-never.log")},
    {"log_file": ("string_param", "")},
    {"log_info": ("uint32_param", 1)},
    {"log_error": None},
    {"log_verbose_level": ("bool_param", True)},
    {"log_verbose_level": ("uint32_param", 4294967295)},
    {"log_format": ("uint32_param", 2)},
    {"log_format": ("string_param", "bad")},
    {
        "log_warning": ("bool_param", False),
        "log_format": ("string_param", "bad"),
        "log_error": ("bool_param", False),
    },
    {
        "log_info": ("bool_param", True),
        "log_warning": ("bool_param", True),
        "log_error": ("bool_param", True),
        "log_verbose_level": ("uint32_param", 0),
        "log_format": ("string_param", "default"),
    },
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("logmetrics")
    repository = make_repository(tmp_path / "models", ["add_sub"])
    (repository / "logger" / "1").mkdir(parents=True)
    (repository / "logger" / "config.pbtxt").write_text(LOGGER_CONFIG)
    (repository / "logger" / "1" / "model.py").write_text(LOGGER_MODEL)
    naiad = NaiadServer(repository, log_dir=tmp_path, extra_args=ARGS).start()
    try:
        with TritonPeer(repository, tmp_path, ARGS) as triton:
            yield naiad, triton
    finally:
        naiad.stop()


def _logging(url: str, body) -> tuple:
    if body is None:
        reply = requests.get(url + "/v2/logging", timeout=30)
    else:
        reply = requests.post(url + "/v2/logging", data=body, timeout=30)
    return reply.status_code, reply.json()


def test_logging_http_answers_match_triton(servers):
    naiad, triton = servers
    differences = []
    for body in HTTP_STEPS:
        ours, theirs = _logging(naiad.url, body), _logging(triton.url, body)
        if ours != theirs:
            differences.append(f"{body!r}: naiad {ours} / triton {theirs}")
    for method, path in (
        ("GET", "/v2/logging/more"),
        ("GET", "/v2/logging/"),
        ("PUT", "/v2/logging"),
    ):
        ours, theirs = (
            requests.request(method, url + path, timeout=30) for url in (naiad.url, triton.url)
        )
        if (ours.status_code, ours.headers["Content-Type"], ours.text) != (
            theirs.status_code,
            theirs.headers["Content-Type"],
            theirs.text,
        ):
            differences.append(f"{method} {path}: naiad {ours.text} / triton {theirs.text}")
    assert differences == [], "\n".join(differences)


def _grpc_settings(port: int, settings: dict):
    # Naiad's generated modules (wire-compatible with Triton's): tritonclient.grpc's cannot
    # share a process with them (tests/grpc_clients/conftest.py says why).
    request = service_pb2.LogSettingsRequest()
    for name, setting in settings.items():
        value = request.settings[name]  # present, with no field set when None
        if setting is not None:
            setattr(value, setting[0], setting[1])
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            answer = stub.LogSettings(request, timeout=30)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    return {
        name: (
            value.WhichOneof("parameter_choice"),
            getattr(value, value.WhichOneof("parameter_choice")),
        )
        for name, value in answer.settings.items()
    }


def test_logging_grpc_answers_match_triton(servers):
    naiad, triton = servers
    differences = []
    for settings in GRPC_STEPS:
        ours = _grpc_settings(naiad.grpc_port, settings)
        theirs = _grpc_settings(triton.grpc_port, settings)
        if ours != theirs:
            differences.append(f"{settings!r}: naiad {ours} / triton {theirs}")
    assert differences == [], "\n".join(differences)


def _add_sub(url: str) -> None:
    assert requests.post(
        url + "/v2/models/add_sub/infer", json=add_sub_json_request(1.0), timeout=30
    ).ok


def _families(text: str) -> list[tuple]:
    """(HELP/TYPE line) and (name, label names) of every sample, in page order, without
    values (and without the label values, which carry timings)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            out.append((line,))
            continue
        head = line.rsplit(" ", 1)[0]
        name, _, labels = head.partition("{")
        keys = tuple(part.split("=", 1)[0] for part in labels.rstrip("}").split(",") if part)
        quantile = [part for part in labels.split(",") if part.startswith("quantile=")]
        out.append((name, keys, *quantile))
    return out


def test_metrics_names_and_labels_match_triton(servers):
    naiad, triton = servers
    for _ in range(3):
        _add_sub(naiad.url)
        _add_sub(triton.url)
    ours = requests.get(f"http://127.0.0.1:{naiad.metrics_port}/metrics", timeout=30).text
    # Triton sets its pinned-memory gauges on its first metrics poll (every 2 s by
    # default), 0 until then: compare once it has polled.
    deadline = time.monotonic() + 15
    while True:
        theirs = requests.get(f"http://127.0.0.1:{triton.metrics_port}/metrics", timeout=30).text
        polled = _value(theirs, "nv_pinned_memory_pool_total_bytes") != "0"
        if polled or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert _families(ours) == _families(theirs)
    # The values that are not timings or host readings agree too.
    for prefix in (
        'nv_inference_request_success{model="add_sub",version="1"}',
        'nv_inference_request_summary_us_count{model="add_sub",version="1"}',
        'nv_inference_compute_infer_summary_us_count{model="add_sub",version="1"}',
        "nv_pinned_memory_pool_total_bytes",
        "nv_pinned_memory_pool_used_bytes",
    ):
        assert _value(ours, prefix) == _value(theirs, prefix), prefix


def _value(text: str, prefix: str) -> str:
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return line.rsplit(" ", 1)[1]
    raise AssertionError(f"no {prefix} in the page")


_STAMPS = (
    (re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ "), r"\1<MMDD hh:mm:ss.us> <pid> "),
    (re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWE]) \d+ "), r"<ISO8601> \1 <pid> "),
)


def _model_lines(read, tag: str) -> list[str]:
    """The logger model's lines for `tag` in the server's output, time and pid masked."""
    deadline = time.monotonic() + 30
    while True:
        lines = [line for line in read().splitlines() if line.endswith(f' {tag}"')]
        if len(lines) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    masked = []
    for line in lines:
        for pattern, mask in _STAMPS:
            line = pattern.sub(mask, line)
        masked.append(line)
    return masked


def test_model_log_lines_look_like_tritons(servers):
    naiad, triton = servers
    reads = (naiad.stderr_text, lambda: triton.log_path.read_text(errors="replace"))
    for number, settings in enumerate(
        (
            {
                "log_verbose_level": 0,
                "log_info": True,
                "log_warning": True,
                "log_format": "default",
            },
            {"log_verbose_level": 1, "log_warning": False, "log_format": "ISO8601"},
        )
    ):
        tag = f"t{number}"
        outputs = []
        for server, read in zip((naiad, triton), reads):
            assert requests.post(server.url + "/v2/logging", json=settings, timeout=30).ok
            body = {"inputs": [{"name": "TAG", "datatype": "BYTES", "shape": [1], "data": [tag]}]}
            reply = requests.post(server.url + "/v2/models/logger/infer", json=body, timeout=30)
            assert reply.ok, reply.text
            outputs.append(_model_lines(read, tag))
        assert outputs[0] == outputs[1]
        assert len(outputs[0]) == 3
    requests.post(naiad.url + "/v2/logging", json={"log_format": "default"}, timeout=30)
