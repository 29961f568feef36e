"""The logging extension, black box: a real `naiad serve` with a Python model that logs at
every level; settings changed at run time over HTTP and gRPC (tritonclient) are seen in
the server's output, its own lines and the running model's alike, in the file given by
--log-file or on stderr. Triton's exact answers are checked against the real Triton in
test_logmetrics_triton.py."""

from __future__ import annotations

import os
import re
import shlex
import threading
import time
from pathlib import Path

import grpc
import pytest
import requests
import tritonclient.http as httpclient
from naiad.protos import grpc_service_pb2 as pb
from naiad.protos import grpc_service_pb2_grpc as pbg
from naiad.scheduling.instance import SETTINGS_WAIT_SECONDS
from server_harness import NaiadServer

TIMEOUT = 30

LOGGER_CONFIG = """
name: "logger"
backend: "python"
max_batch_size: 0
input [ { name: "TAG" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

LOGGER_MODEL = """
import ctypes
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            hold = json.loads(request.parameters()).get("hold")
            if hold:
                # system() through PyDLL keeps the GIL, as a long C call does: no other
                # thread of the worker runs until the test releases the shell it runs.
                ctypes.PyDLL(None).system(hold.encode())
            tag = pb_utils.get_input_tensor_by_name(request, "TAG").as_numpy()[0].decode()
            pb_utils.Logger.log_info(f"info {tag}")
            pb_utils.Logger.log_warn(f"warn {tag}")
            pb_utils.Logger.log_error(f"error {tag}")
            pb_utils.Logger.log_verbose(f"verbose {tag}")
            out = pb_utils.Tensor("OUT", np.array([tag.encode()], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

DEFAULT_LINE = re.compile(r"([IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} (\d+) ([^ :]+):(\d+)\] (.*)")
ISO_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([IWE]) (\d+) ([^ :]+):(\d+)\] (.*)")


def _repository(tmp_path):
    model = tmp_path / "repository" / "logger"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(LOGGER_CONFIG)
    (model / "1" / "model.py").write_text(LOGGER_MODEL)
    return tmp_path / "repository"


def _infer(url: str, tag: str, hold: str = "") -> None:
    body = {"inputs": [{"name": "TAG", "datatype": "BYTES", "shape": [1], "data": [tag]}]}
    if hold:
        body["parameters"] = {"hold": hold}
    response = requests.post(f"{url}/v2/models/logger/infer", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text


def _model_lines(read, tag: str, expected: int) -> dict:
    """{message: (severity, line format)} of the model's lines for `tag`, once `expected`
    of them are out (the worker writes them itself, a moment after the response)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        found = {}
        for line in read().splitlines():
            for form, pattern in (("default", DEFAULT_LINE), ("ISO8601", ISO_LINE)):
                match = pattern.fullmatch(line)
                if match and match.group(3) == "model.py" and match.group(5).endswith(f' {tag}"'):
                    found[match.group(5).strip('"')] = (match.group(1), form, int(match.group(2)))
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


@pytest.fixture
def file_server(tmp_path):
    log_file = tmp_path / "server.log"
    args = [f"--log-file={log_file}", "--log-verbose=0"]
    with NaiadServer(_repository(tmp_path), log_dir=tmp_path, extra_args=args) as server:
        yield server, log_file


def test_log_file_and_settings_changed_at_run_time(file_server):
    server, log_file = file_server
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    settings = client.get_log_settings()
    assert settings == {
        "log_file": str(log_file),
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    assert "logging" in client.get_server_metadata()["extensions"]
    # Everything goes to the file: the server's own lines and the load table.
    text = log_file.read_text()
    assert re.search(r'\] "Started HTTPService at 127\.0\.0\.1:\d+"\n', text)
    assert "| logger | 1       | READY  |" in text
    assert "Started HTTPService" not in server.stderr_text()

    _infer(server.url, "a")
    lines = _model_lines(log_file.read_text, "a", 3)
    assert lines == {
        "info a": ("I", "default", server.pid),  # the server's pid, as Triton writes it
        "warn a": ("W", "default", server.pid),
        "error a": ("E", "default", server.pid),
    }

    # The running worker learns of the change: verbose on, warnings off, ISO8601.
    changed = client.update_log_settings(
        {"log_verbose_level": 1, "log_warning": False, "log_format": "ISO8601"}
    )
    assert changed == {
        **settings,
        "log_verbose_level": 1,
        "log_warning": False,
        "log_format": "ISO8601",
    }
    _infer(server.url, "b")
    lines = _model_lines(log_file.read_text, "b", 3)
    assert lines == {
        "info b": ("I", "ISO8601", server.pid),
        "error b": ("E", "ISO8601", server.pid),
        "verbose b": ("I", "ISO8601", server.pid),
    }

    # gRPC's LogSettings changes the same settings (tritonclient.grpc's own calls are in
    # tests/grpc_clients/test_grpc_server.py; its modules cannot share this process).
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = pbg.GRPCInferenceServiceStub(channel)
        request = pb.LogSettingsRequest()
        request.settings["log_info"].bool_param = False
        request.settings["log_format"].string_param = "default"
        answer = stub.LogSettings(request, timeout=TIMEOUT).settings
        assert answer["log_info"].bool_param is False
        assert answer["log_format"].string_param == "default"
        assert answer["log_verbose_level"].uint32_param == 1
        assert answer["log_file"].string_param == str(log_file)
        request = pb.LogSettingsRequest()
        request.settings["log_file"].string_param = "/tmp/elsewhere.log"
        with pytest.raises(grpc.RpcError) as refused:
            stub.LogSettings(request, timeout=TIMEOUT)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert refused.value.details() == (
            "log file location can not be updated through network protocol"
        )
    _infer(server.url, "c")
    lines = _model_lines(log_file.read_text, "c", 2)
    assert lines == {
        "error c": ("E", "default", server.pid),
        "verbose c": ("I", "default", server.pid),
    }


def test_bad_settings_get_tritons_statuses(file_server):
    server, _ = file_server
    url = f"{server.url}/v2/logging"
    for body, status, message in (
        ('{"log_file": "/tmp/x.log"}', 501, "log file location can not be updated through network protocol"),
        ('{"log_info": "yes"}', 500, "attempt to access JSON non-boolean as boolean"),
        ('{"log_verbose_level": -1}', 500, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ('{"log_format": "iso"}', 503, "invalid argument for --log_format, got: iso"),
        ("{bad", 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1"),
        ("", 500, "failed to parse the request JSON buffer: The document is empty. at 0"),
    ):  # fmt: skip
        response = requests.post(url, data=body, timeout=TIMEOUT)
        assert (response.status_code, response.json()) == (status, {"error": message}), body
    assert requests.put(url, timeout=TIMEOUT).status_code == 405


def test_stderr_log_with_flags_and_changes(tmp_path):
    args = ["--log-format=ISO8601", "--log-info=false", "--log-verbose=true"]
    args += ["--model-control-mode=explicit", "--load-model=logger"]
    with NaiadServer(_repository(tmp_path), log_dir=tmp_path, extra_args=args) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        assert client.get_log_settings()["log_verbose_level"] == 1
        _infer(server.url, "x")
        lines = _model_lines(server.stderr_text, "x", 3)
        assert lines == {
            "warn x": ("W", "ISO8601", server.pid),
            "error x": ("E", "ISO8601", server.pid),
            "verbose x": ("I", "ISO8601", server.pid),
        }
        assert "Started HTTPService" not in server.stderr_text()  # info lines are off
        client.update_log_settings(
            {"log_info": True, "log_verbose_level": 0, "log_format": "default"}
        )
        _infer(server.url, "y")
        lines = _model_lines(server.stderr_text, "y", 3)
        assert lines == {
            "info y": ("I", "default", server.pid),
            "warn y": ("W", "default", server.pid),
            "error y": ("E", "default", server.pid),
        }
        client.update_log_settings({"log_error": False})
        _infer(server.url, "z")
        assert set(_model_lines(server.stderr_text, "z", 2)) == {"info z", "warn z"}
        # A worker started after the change (the model loaded again) starts with them.
        client.unload_model("logger")
        client.load_model("logger")
        _infer(server.url, "w")
        assert set(_model_lines(server.stderr_text, "w", 2)) == {"info w", "warn w"}


class _Held:
    """The logger model held in a C call, GIL and all, until `release()`: the shell its
    system() runs writes `started` (so the worker is inside the call by then), then waits
    for a line on the FIFO `release`."""

    def __init__(self, server, folder: Path):
        folder.mkdir()
        self.started = folder / "started"
        self.fifo = folder / "release"
        os.mkfifo(self.fifo)
        command = f"touch {shlex.quote(str(self.started))}; read go < {shlex.quote(str(self.fifo))}"
        self.thread = threading.Thread(target=_infer, args=(server.url, "held", command))
        self.released_at = None

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not self.started.exists():
            assert time.monotonic() < deadline, "the model never started its hold"
            time.sleep(0.02)
        return self

    def release(self) -> None:
        if self.released_at is None:
            self.released_at = time.monotonic()
            # Non-blocking: the shell has the FIFO open for reading, or this fails.
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"go\n")
            os.close(fd)

    def __exit__(self, *exc):
        self.release()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()


def _post_settings(url: str, settings: dict, answers: list) -> None:
    reply = requests.post(url + "/v2/logging", json=settings, timeout=TIMEOUT)
    answers.append((reply, time.monotonic()))


def test_a_change_is_answered_once_the_workers_follow_it(tmp_path):
    """As in Triton, whose settings are its one process's: once the change is answered,
    the next request's model lines follow it. A worker holding the GIL in C code applies
    it when the call returns, and is waited for, up to SETTINGS_WAIT_SECONDS."""
    with NaiadServer(_repository(tmp_path), log_dir=tmp_path) as server:
        _infer(server.url, "before")
        answers = []
        with _Held(server, tmp_path / "first") as held:
            change = threading.Thread(
                target=_post_settings, args=(server.url, {"log_format": "ISO8601"}, answers)
            )
            change.start()
            # Not answered while the worker is held (well within SETTINGS_WAIT_SECONDS).
            change.join(0.5)
            assert not answers
            held.release()
            change.join(TIMEOUT)
        ((reply, answered_at),) = answers
        assert reply.ok, reply.text
        assert answered_at > held.released_at
        _infer(server.url, "after")
        lines = _model_lines(server.stderr_text, "after", 3)
        assert {form for _severity, form, _pid in lines.values()} == {"ISO8601"}
        # A worker that stays in its call does not hold the answer past the limit: it
        # comes while the worker is still held, after the limit was waited.
        with _Held(server, tmp_path / "second"):
            start = time.monotonic()
            reply = requests.post(
                server.url + "/v2/logging", json={"log_format": "default"}, timeout=TIMEOUT
            )
            waited = time.monotonic() - start
            assert reply.ok, reply.text
            assert waited >= SETTINGS_WAIT_SECONDS - 0.1, waited
        _infer(server.url, "last")
        lines = _model_lines(server.stderr_text, "last", 3)
        assert {form for _severity, form, _pid in lines.values()} == {"default"}
