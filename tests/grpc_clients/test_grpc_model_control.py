"""Model control over gRPC against real servers: the twins of tests/test_model_control.py's
HTTP tests, driven with tritonclient.grpc (RepositoryModelLoad with config and file
overrides, bad loads, reload under constant gRPC load, poll mode) and the repository index
compared between the two protocols on one server.

Status codes follow Triton's mapping: where HTTP answers 500, gRPC answers INTERNAL; 400
is INVALID_ARGUMENT. The messages are the same.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest
import requests
import tritonclient.grpc as grpcclient
from model_control_support import (
    ADD_SUB_MODEL,
    add_sub_client_inputs,
    add_sub_config,
    add_sub_pbtxt,
    explicit_server,
    write_model,
)
from model_control_support import index as http_index
from server_harness import NaiadServer
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

INTERNAL = "StatusCode.INTERNAL"


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    """An explicit-mode server that loads add_sub at start; the rest is loaded by tests."""
    yield from explicit_server(tmp_path_factory.mktemp("grpc-explicit"), "grpc-explicit")


@pytest.fixture(scope="module")
def client(explicit):
    with grpcclient.InferenceServerClient(f"{explicit.host}:{explicit.grpc_port}") as client:
        yield client


def _inputs(value: float):
    return add_sub_client_inputs(grpcclient, value)


def _add(client, model: str, value: float) -> float:
    """OUTPUT0[0] of `model` for INPUT0 = value, INPUT1 = 1."""
    result = client.infer(model, _inputs(value), client_timeout=60)
    return float(result.as_numpy("OUTPUT0")[0, 0])


def _error(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def _grpc_index(server: NaiadServer, ready: bool | None = None) -> list[dict]:
    """RepositoryIndex as JSON-like dicts (tritonclient's call cannot set `ready`)."""
    request = (
        pb.RepositoryIndexRequest() if ready is None else pb.RepositoryIndexRequest(ready=ready)
    )
    with grpc.insecure_channel(f"{server.host}:{server.grpc_port}") as channel:
        reply = pbg.GRPCInferenceServiceStub(channel).RepositoryIndex(request, timeout=60)
    entries = []
    for model in reply.models:
        entry = {"name": model.name}
        for field in ("version", "state", "reason"):
            if getattr(model, field):
                entry[field] = getattr(model, field)
        entries.append(entry)
    return entries


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except InferenceServerException:
            pass
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


# -- explicit mode: overrides and bad loads -----------------------------------------------


def test_config_override_is_the_served_config(client):
    client.load_model("add_sub", config=json.dumps(add_sub_config(max_batch_size=8)))
    served = client.get_model_config("add_sub", as_json=True)["config"]
    assert served["max_batch_size"] == 8
    assert _add(client, "add_sub", 2.0) == 3.0
    client.load_model("add_sub", config=json.dumps(add_sub_config()))
    assert client.get_model_config("add_sub", as_json=True)["config"]["max_batch_size"] == 64


def test_file_override_is_the_model_that_runs(client, explicit):
    # A model that exists only in the request, whose model.py adds 100 more.
    changed = ADD_SUB_MODEL.replace("(in_0 + in_1)", "(in_0 + in_1 + 100)")
    assert changed != ADD_SUB_MODEL
    before = _temporary_copies()
    client.load_model(
        "sent",
        config=json.dumps(add_sub_config("sent")),
        files={"file:1/model.py": changed.encode()},
    )
    assert client.is_model_ready("sent")
    assert _add(client, "sent", 4.0) == 105.0
    assert _add(client, "add_sub", 4.0) == 5.0  # the repository's add_sub is untouched
    assert not (explicit.repository / "sent").exists()  # never written into the repository
    tmp = Path(tempfile.gettempdir())
    (copy,) = [c for c in _temporary_copies() - before if (tmp / c / "sent").is_dir()]
    assert (tmp / copy / "sent" / "1" / "model.py").read_text() == changed
    client.unload_model("sent")
    assert not client.is_model_ready("sent")
    assert not (tmp / copy).exists()  # the copy goes with the model


def _temporary_copies() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("naiad-model-")}


def test_bad_config_override_is_internal_and_names_the_model(client):
    for config in ("{bad", json.dumps({"bogus": 1})):
        err = _error(lambda config=config: client.load_model("add_sub", config=config))
        assert err.status() == INTERNAL
        assert err.message().startswith("failed to load 'add_sub'"), err.message()
        assert "Invalid config override" in err.message()
    assert _add(client, "add_sub", 1.0) == 2.0  # still the old version


def test_loading_a_missing_model_is_internal_with_the_reason(client, explicit):
    err = _error(lambda: client.load_model("no_such_model"))
    assert err.status() == INTERNAL
    assert err.message().startswith(
        "failed to load 'no_such_model', failed to poll from model repository"
    )
    assert "no model folder 'no_such_model'" in err.message()
    assert "no_such_model" not in [e["name"] for e in _grpc_index(explicit)]


def test_broken_config_and_initialize_raising(client, explicit):
    err = _error(lambda: client.load_model("broken"))
    assert err.status() == INTERNAL
    assert "broken" in err.message() and "unknown field 'bogus_field'" in err.message()
    err = _error(lambda: client.load_model("init_fails"))
    assert err.status() == "StatusCode.INVALID_ARGUMENT"  # HTTP's 400
    assert err.message().startswith(
        "load failed for model 'init_fails': version 1 is at UNAVAILABLE"
    )
    assert _add(client, "add_sub", 1.0) == 2.0  # others unaffected


def test_path_traversal_is_refused_and_nothing_is_written_outside(client, explicit):
    before = set(os.listdir(tempfile.gettempdir()))
    for path in ("../grpc_escaped.py", "../../grpc_escaped.py", "1/../../grpc_escaped.py"):
        err = _error(
            lambda path=path: client.load_model(
                "other",
                config=json.dumps(add_sub_config("other")),
                files={f"file:{path}": b"print('escaped')\n"},
            )
        )
        assert err.status() == INTERNAL
        assert "'other'" in err.message()
        assert "must be relative and stay inside the model folder" in err.message()
    for folder in (explicit.repository, explicit.repository.parent, Path(tempfile.gettempdir())):
        assert not (folder / "grpc_escaped.py").exists()
    # No copy left behind by a refused request (other runs may make copies of their own).
    tmp = Path(tempfile.gettempdir())
    assert not [c for c in _temporary_copies() - before if (tmp / c / "other").exists()]
    for name in ("..", ".hidden"):
        err = _error(lambda name=name: client.load_model(name))
        assert err.status() == INTERNAL
        assert f"invalid model name '{name}'" in err.message()
    assert not client.is_model_ready("other")


# -- the index, over both protocols --------------------------------------------------------


def test_index_and_ready_filter_match_http(client, explicit):
    # READY (add_sub), UNAVAILABLE with a reason (broken), and other, never loaded (its
    # entry keeps the reason of the refused loads of the traversal test, as HTTP shows).
    with pytest.raises(InferenceServerException):
        client.load_model("broken")
    for ready in (None, True, False):
        assert _grpc_index(explicit, ready) == http_index(explicit.url, ready), ready
    everything = _grpc_index(explicit)
    assert {"name": "add_sub", "version": "1", "state": "READY"} in everything
    (broken,) = [e for e in everything if e["name"] == "broken"]
    assert broken["state"] == "UNAVAILABLE" and "bogus_field" in broken["reason"]
    (other,) = [e for e in everything if e["name"] == "other"]
    assert other.get("state") != "READY"
    assert _grpc_index(explicit, True) == [e for e in everything if e.get("state") == "READY"]
    listed = client.get_model_repository_index(as_json=True)["models"]
    assert [{k: v for k, v in e.items()} for e in listed] == everything


# -- reload under constant gRPC load ------------------------------------------------------


class GrpcLoad:
    """A thread that sends add_sub infer requests over gRPC without pause until stopped
    (or a bound on count and time); every answer is checked, every failure kept."""

    def __init__(self, server: NaiadServer, limit: int = 20000, seconds: float = 180):
        self.url = f"{server.host}:{server.grpc_port}"
        self.limit, self.seconds = limit, seconds
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GrpcLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        start = self.ok
        while self.ok - start < count and time.monotonic() < deadline:
            time.sleep(0.02)

    def _run(self) -> None:
        deadline = time.monotonic() + self.seconds
        value = 0.0
        with grpcclient.InferenceServerClient(self.url) as client:
            while (
                not self._stop.is_set()
                and self.ok + len(self.failures) < self.limit
                and time.monotonic() < deadline
            ):
                value += 1.0
                try:
                    got = _add(client, "add_sub", value)
                    if got == value + 1.0:
                        self.ok += 1
                    else:
                        self.failures.append(f"{value} + 1 gave {got}")
                except InferenceServerException as exc:
                    self.failures.append(f"{exc.status()} {exc.message()}")


def test_reload_under_constant_grpc_load_fails_no_request(client, explicit):
    with GrpcLoad(explicit) as traffic:
        traffic.wait_for(30)
        for size, count in ((8, 2), (32, 1), (64, 1)):
            config = add_sub_config(max_batch_size=size, count=count)
            client.load_model("add_sub", config=json.dumps(config))
            served = client.get_model_config("add_sub", as_json=True)["config"]
            assert served["max_batch_size"] == size
            traffic.wait_for(20)
        traffic.wait_for(30)
    assert traffic.failures == [], traffic.failures[:5]
    assert traffic.ok >= 100
    assert {"name": "add_sub", "version": "1", "state": "READY"} in _grpc_index(explicit)
    assert client.is_model_ready("add_sub")


# -- poll mode -------------------------------------------------------------------------------


def test_poll_mode_serves_models_added_on_disk_and_drops_removed_ones(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    args = ["--model-control-mode=poll", "--repository-poll-secs=1"]
    with NaiadServer(repo, log_dir=tmp_path, name="grpc-poll", extra_args=args) as server:
        with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
            assert _add(client, "add_sub", 1.0) == 2.0
            assert not client.is_model_ready("other")
            write_model(repo, "other", add_sub_pbtxt("other"), ADD_SUB_MODEL)
            _wait(lambda: client.is_model_ready("other"))
            assert _add(client, "other", 3.0) == 4.0
            assert {"name": "other", "version": "1", "state": "READY"} in _grpc_index(server)
            for path in sorted((repo / "other").rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            (repo / "other").rmdir()
            _wait(lambda: not client.is_model_ready("other"))
            _wait(lambda: "other" not in [e["name"] for e in _grpc_index(server)])
            err = _error(lambda: client.infer("other", _inputs(1.0), client_timeout=30))
            assert "other" in err.message()
            assert _add(client, "add_sub", 1.0) == 2.0
            assert requests.get(server.url + "/v2/models/add_sub/ready").status_code == 200
