"""Model control over HTTP against real servers: the control modes, the repository
extension, reload without dropping a request, overrides, and every bad input."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import requests
import tritonclient.http as httpclient
from model_control_support import (
    ADD_SUB_MODEL,
    ConstantLoad,
    add_sub_config,
    add_sub_json_request,
    add_sub_pbtxt,
    entries,
    explicit_server,
    file_parameter,
    index,
    load,
    one_input_pbtxt,
    post,
    unload,
    write_model,
)
from server_harness import TEST_MODELS, NaiadServer
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)

NOT_EXPLICIT = "explicit model load / unload is not allowed if polling is enabled"


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    """An explicit-mode server that loads add_sub at start; the rest is loaded by tests."""
    yield from explicit_server(tmp_path_factory.mktemp("explicit"), "explicit")


def _infer(url: str, model: str, value: float = 1.0, version: str = "") -> requests.Response:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return requests.post(url + path, json=add_sub_json_request(value), timeout=60)


# -- explicit mode -----------------------------------------------------------------------


def test_explicit_mode_loads_only_what_is_named(explicit):
    assert index(explicit.url) == [
        {"name": "add_sub", "version": "1", "state": "READY"},
        {"name": "broken"},
        {"name": "init_fails"},
        {"name": "other"},
    ]
    assert index(explicit.url, ready=True) == [
        {"name": "add_sub", "version": "1", "state": "READY"}
    ]
    assert _infer(explicit.url, "other").status_code == 404


def test_load_and_unload_cycle_with_tritonclient(explicit):
    client = httpclient.InferenceServerClient(explicit.url[len("http://") :])
    for _ in range(2):
        client.load_model("other")
        assert client.is_model_ready("other")
        assert _infer(explicit.url, "other", 2.0).json()["outputs"][0]["data"][0] == 3.0
        client.unload_model("other")
        assert not client.is_model_ready("other")
        assert entries(explicit.url, "other") == [
            {"name": "other", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
        ]
        reply = _infer(explicit.url, "other")
        # What Triton 2.51 answers here too (checked against it with the same steps).
        assert (reply.status_code, reply.json()) == (
            404,
            {"error": "Request for unknown model: 'other' has no available versions"},
        )
    names = [e["name"] for e in client.get_model_repository_index()]
    assert names == ["add_sub", "broken", "init_fails", "other"]


def test_unloading_an_unknown_model_succeeds(explicit):
    assert unload(explicit.url, "no_such_model").status_code == 200


def test_loading_a_missing_model_is_internal_with_the_reason(explicit):
    reply = load(explicit.url, "no_such_model")
    assert reply.status_code == 500
    message = reply.json()["error"]
    assert message.startswith(
        "failed to load 'no_such_model', failed to poll from model repository"
    )
    assert "no model folder 'no_such_model'" in message
    assert "no_such_model" not in [e["name"] for e in index(explicit.url)]


def test_broken_config_has_its_reason_in_response_and_index(explicit):
    reply = load(explicit.url, "broken")
    assert reply.status_code == 500
    assert "unknown field 'bogus_field'" in reply.json()["error"]
    (entry,) = entries(explicit.url, "broken")
    assert entry["state"] == "UNAVAILABLE"
    assert "unknown field 'bogus_field'" in entry["reason"]
    assert _infer(explicit.url, "add_sub").status_code == 200  # others unaffected


def test_initialize_raising_is_reported_per_version(explicit):
    reply = load(explicit.url, "init_fails")
    assert reply.status_code == 400
    message = reply.json()["error"]
    assert message.startswith("load failed for model 'init_fails': version 1 is at UNAVAILABLE")
    assert "init_fails refuses to initialize" in message
    (entry,) = entries(explicit.url, "init_fails")
    assert entry["version"] == "1" and entry["state"] == "UNAVAILABLE"
    assert "init_fails refuses to initialize" in entry["reason"]
    assert _infer(explicit.url, "add_sub").status_code == 200
    # As in Triton, unloading a version that never loaded keeps its reason.
    assert unload(explicit.url, "init_fails").status_code == 200
    assert entries(explicit.url, "init_fails")[0]["state"] == "UNAVAILABLE"
    assert requests.get(explicit.url + "/v2/health/ready").status_code == 400


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{bad", "failed to parse the request JSON buffer"),
        (b'{"parameters": 5}', "'parameters' must be a JSON object"),
        (b'{"parameters": {"config": 5}}', "'config' must be a string of JSON"),
        (b'{"parameters": {"config": "{bad"}}', "Invalid config override"),
        (b'{"parameters": {"config": "{\\"bogus\\": 1}"}}', "Invalid config override"),
        (b'{"parameters": {"file:1/model.py": "!!"}}', "is not valid base64"),
    ],
)
def test_malformed_load_requests(explicit, body, message):
    reply = post(explicit.url, "/v2/repository/models/add_sub/load", body)
    assert reply.status_code == 500, reply.text
    assert message in reply.json()["error"]
    assert _infer(explicit.url, "add_sub").status_code == 200  # still the old version


def test_index_body_must_be_json_with_a_boolean(explicit):
    assert post(explicit.url, "/v2/repository/index", b"{bad").status_code == 500
    reply = post(explicit.url, "/v2/repository/index", {"ready": "yes"})
    assert reply.status_code == 500
    assert "'ready' must be a boolean" in reply.json()["error"]


def test_repository_paths_and_methods(explicit):
    assert requests.get(explicit.url + "/v2/repository/index").status_code == 405
    assert requests.get(explicit.url + "/v2/repository/models/add_sub/load").status_code == 405
    assert post(explicit.url, "/v2/repository/models/add_sub").status_code == 404
    assert post(explicit.url, "/v2/repository/models/add_sub/reload").status_code == 404


def test_path_traversal_names_are_refused(explicit):
    for name in ("..", ".hidden"):
        # http.client sends the path as it is (requests would resolve the dots).
        connection = http.client.HTTPConnection(explicit.host, explicit.http_port, timeout=30)
        connection.request("POST", f"/v2/repository/models/{name}/load")
        reply = connection.getresponse()
        body = json.loads(reply.read())
        connection.close()
        assert reply.status == 500
        assert f"invalid model name '{name}'" in body["error"]


def test_config_override_reloads_and_file_overrides_make_a_new_model(explicit, tmp_path):
    config = add_sub_config(max_batch_size=8)
    assert load(explicit.url, "add_sub", {"config": json.dumps(config)}).status_code == 200
    served = requests.get(explicit.url + "/v2/models/add_sub/config").json()
    assert served["max_batch_size"] == 8
    # A model that exists only in the request: config and model.py sent with it.
    parameters = {
        "config": json.dumps(add_sub_config("sent")),
        "file:1/model.py": file_parameter(ADD_SUB_MODEL),
    }
    before = _temporary_copies()
    assert load(explicit.url, "sent", parameters).status_code == 200
    assert _infer(explicit.url, "sent", 4.0).json()["outputs"][0]["data"][0] == 5.0
    assert not (explicit.repository / "sent").exists()  # never written into the repository
    (copy,) = _temporary_copies() - before
    assert (Path(tempfile.gettempdir(), copy, "sent", "1", "model.py")).read_text() == ADD_SUB_MODEL
    assert "sent" not in [e["name"] for e in index(explicit.url)]  # as in Triton
    assert unload(explicit.url, "sent").status_code == 200
    assert _temporary_copies() == before  # the copy goes with the model
    assert load(explicit.url, "add_sub", {"config": json.dumps(add_sub_config())}).ok


def _temporary_copies() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("naiad-model-")}


def test_file_override_cannot_write_outside_the_model_folder(explicit):
    before = set(os.listdir(tempfile.gettempdir()))
    for path in ("../../escaped.py", "/tmp/escaped.py", "1/../../escaped.py", "./x"):
        parameters = {
            "config": json.dumps(add_sub_config("other")),
            f"file:{path}": file_parameter("print('escaped')"),
        }
        reply = load(explicit.url, "other", parameters)
        assert reply.status_code == 500, reply.text
        assert "must be relative and stay inside the model folder" in reply.json()["error"]
    assert not (explicit.repository.parent / "escaped.py").exists()
    assert not Path(tempfile.gettempdir(), "escaped.py").exists()
    # No temporary copy is left behind by a refused request.
    leftovers = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("naiad-model-")}
    assert leftovers <= before


def test_file_override_without_config_is_refused(explicit):
    reply = load(explicit.url, "other", {"file:1/model.py": file_parameter(ADD_SUB_MODEL)})
    assert reply.status_code == 500
    assert "need a 'config' parameter" in reply.json()["error"]


def test_failed_reload_keeps_the_old_version_serving(explicit, tmp_path):
    config = add_sub_config()
    parameters = {
        "config": json.dumps(config),
        "file:1/model.py": file_parameter("raise ImportError('no such weights')\n"),
    }
    reply = load(explicit.url, "add_sub", parameters)
    assert reply.status_code == 400
    assert "no such weights" in reply.json()["error"]
    assert entries(explicit.url, "add_sub") == [
        {"name": "add_sub", "version": "1", "state": "READY"}
    ]
    assert _infer(explicit.url, "add_sub", 1.0).json()["outputs"][0]["data"][0] == 2.0


def test_reload_answers_the_requests_queued_on_the_replaced_version(explicit):
    """Requests the HTTP I/O loop queued on a version that a reload replaces are
    answered by it, not failed when it is removed: it drains them first."""
    slow_model = ADD_SUB_MODEL.replace(
        "    def execute(self, requests):\n",
        "    def execute(self, requests):\n        time.sleep(0.2)\n",
    )
    slow_model = "import time\n" + slow_model
    assert "time.sleep(0.2)" in slow_model
    slow = {
        "config": json.dumps(add_sub_config("other", max_batch_size=1)),
        "file:1/model.py": file_parameter(slow_model),
    }
    assert load(explicit.url, "other", slow).status_code == 200
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            replies = [pool.submit(_infer, explicit.url, "other", 1.0) for _ in range(8)]
            time.sleep(0.1)  # queued on the first version, one at a time (0.2 s each)
            reloaded = dict(slow, config=json.dumps(add_sub_config("other", max_batch_size=2)))
            assert load(explicit.url, "other", reloaded).status_code == 200
            answers = [reply.result() for reply in replies]
        assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
        assert all(a.json()["outputs"][0]["data"][0] == 2.0 for a in answers)
    finally:
        assert unload(explicit.url, "other").status_code == 200


def test_reload_under_constant_load_fails_no_request(explicit):
    """Reloads (new config, new files) and load/unload of another model while clients
    send requests to add_sub without pause, on the lane and the general path."""
    with ConstantLoad(explicit.url) as traffic:
        traffic.wait_for(50)
        for round_ in range(3):
            for size in (8, 64):
                config = add_sub_config(max_batch_size=size, count=1 + round_ % 2)
                reply = load(explicit.url, "add_sub", {"config": json.dumps(config)})
                assert reply.status_code == 200, reply.text
                traffic.wait_for(20)
            assert load(explicit.url, "other").status_code == 200
            assert unload(explicit.url, "other").status_code == 200
        sent = {
            "config": json.dumps(add_sub_config()),
            "file:1/model.py": file_parameter(ADD_SUB_MODEL + "\n# changed\n"),
        }
        assert load(explicit.url, "add_sub", sent).status_code == 200
        traffic.wait_for(50)
    assert traffic.failures == [], traffic.failures[:5]
    assert traffic.ok > 200
    assert requests.get(explicit.url + "/v2/models/add_sub/ready").status_code == 200
    assert "restarting" not in explicit.stderr_text()


# -- none and poll modes ------------------------------------------------------------------


def test_none_mode_refuses_load_and_unload_as_triton(tmp_path):
    repo = write_model(tmp_path / "models", "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL).parent
    with NaiadServer(repo, log_dir=tmp_path) as server:
        for reply in (load(server.url, "add_sub"), unload(server.url, "add_sub")):
            assert reply.status_code == 503
            assert reply.json() == {"error": NOT_EXPLICIT}
        assert index(server.url) == [{"name": "add_sub", "version": "1", "state": "READY"}]
        with pytest.raises(InferenceServerException, match="polling is enabled"):
            httpclient.InferenceServerClient(server.url[7:]).load_model("add_sub")


def _wait(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def test_poll_mode_applies_changes_on_disk(tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL)
    args = ["--model-control-mode=poll", "--repository-poll-secs=1"]
    with NaiadServer(repo, log_dir=tmp_path, extra_args=args) as server:
        assert load(server.url, "add_sub").status_code == 503
        with ConstantLoad(server.url, threads=2) as traffic:
            traffic.wait_for(20)
            # A model appears.
            write_model(repo, "other", add_sub_pbtxt("other"), ADD_SUB_MODEL)
            _wait(lambda: entries(server.url, "other") and _infer(server.url, "other").ok)
            # A config changes: the model is reloaded with it.
            (repo / "add_sub" / "config.pbtxt").write_text(add_sub_pbtxt(max_batch_size=4))
            config_url = server.url + "/v2/models/add_sub/config"
            _wait(lambda: requests.get(config_url).json()["max_batch_size"] == 4)
            # A version is added: the policy (latest 1) serves it instead of version 1.
            (repo / "add_sub" / "2").mkdir()
            (repo / "add_sub" / "2" / "model.py").write_text(ADD_SUB_MODEL)
            _wait(lambda: [e.get("version") for e in entries(server.url, "add_sub")] == ["2"])
            traffic.wait_for(20)
            # A broken config: the serving version stays.
            (repo / "add_sub" / "config.pbtxt").write_text("bogus_field: 1\n")
            _wait(lambda: "unknown field 'bogus_field'" in server.stderr_text())
            assert entries(server.url, "add_sub")[0]["state"] == "READY"
            traffic.wait_for(20)
        assert traffic.failures == [], traffic.failures[:5]
        # A model leaves the repository: it is unloaded and leaves the index.
        for path in sorted((repo / "other").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / "other").rmdir()
        _wait(lambda: _infer(server.url, "other").status_code in (400, 404))
        assert "other" not in [e["name"] for e in index(server.url)]
        assert "model 'other' left the repository: unloading it" in server.stderr_text()


# -- several repositories ------------------------------------------------------------------


def test_several_repositories_serve_as_one(tmp_path):
    first = write_model(tmp_path / "a", "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL).parent
    second = write_model(tmp_path / "b", "other", add_sub_pbtxt("other"), ADD_SUB_MODEL).parent
    args = ["--model-repository", str(second)]
    with NaiadServer(first, log_dir=tmp_path, extra_args=args) as server:
        assert [e["name"] for e in index(server.url, ready=True)] == ["add_sub", "other"]


def test_a_name_in_two_repositories_is_an_error(tmp_path):
    first = write_model(tmp_path / "a", "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL).parent
    second = write_model(tmp_path / "b", "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL).parent
    server = NaiadServer(first, log_dir=tmp_path, extra_args=["--model-repository", str(second)])
    server.start(wait=None)
    assert server.wait_exit(120) == 1
    assert (
        "failed to poll model 'add_sub': not unique across all model repositories"
        in server.stderr_text()
    )


def test_explicit_mode_fails_start_for_a_missing_load_model(tmp_path):
    repo = write_model(tmp_path / "models", "add_sub", add_sub_pbtxt(), ADD_SUB_MODEL).parent
    args = ["--model-control-mode=explicit", "--load-model=nope"]
    server = NaiadServer(repo, log_dir=tmp_path, extra_args=args)
    server.start(wait=None)
    assert server.wait_exit(120) == 1
    assert "no model folder 'nope'" in server.stderr_text()


# -- in-flight requests, LOADING, parallel loads ---------------------------------------------

SLOW_INIT = """
import time

class TritonPythonModel:
    def initialize(self, args):
        time.sleep({seconds})

    def execute(self, requests):
        return []
"""


def _sleep_request(seconds: float) -> dict:
    return {"inputs": [{"name": "SECONDS", "shape": [1, 1], "datatype": "FP32", "data": [seconds]}]}


def test_unload_and_reload_let_requests_in_flight_finish(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    shutil.copytree(TEST_MODELS / "sleeper", repo / "sleeper")
    args = ["--model-control-mode=explicit", "--load-model=sleeper"]
    with NaiadServer(repo, log_dir=tmp_path, extra_args=args) as server:
        url = server.url + "/v2/models/sleeper/infer"
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            slow = [pool.submit(requests.post, url, json=_sleep_request(1.5)) for _ in range(2)]
            time.sleep(0.5)  # both executing now
            started = time.monotonic()
            config = (repo / "sleeper" / "config.pbtxt").read_text()
            reload = pool.submit(
                load,
                server.url,
                "sleeper",
                {
                    "config": json.dumps(
                        {
                            "name": "sleeper",
                            "backend": "python",
                            "max_batch_size": 8,
                            "input": [{"name": "SECONDS", "data_type": "TYPE_FP32", "dims": [1]}],
                            "output": [
                                {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]},
                                {"name": "OUTPUT_PID", "data_type": "TYPE_INT64", "dims": [1]},
                            ],
                            "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
                        }
                    )
                },
            )
            assert "count: 2" in config
            assert reload.result().status_code == 200
            assert [f.result().status_code for f in slow] == [200, 200]
            # Requests during the reload went to the new version: none failed.
            assert requests.post(url, json=_sleep_request(0.0)).status_code == 200
            slow = [pool.submit(requests.post, url, json=_sleep_request(1.5))]
            time.sleep(0.5)
            assert unload(server.url, "sleeper").status_code == 200
            assert time.monotonic() - started > 1.0  # unload waited for the request
            assert slow[0].result().status_code == 200
        assert requests.post(url, json=_sleep_request(0.0)).status_code in (400, 404)


def test_index_shows_loading_and_versions_load_in_parallel(tmp_path):
    repo = tmp_path / "models"
    for index_ in range(4):
        name = f"slow_{index_}"
        write_model(repo, name, one_input_pbtxt(name), SLOW_INIT.format(seconds=2))
    args = ["--model-control-mode=explicit", "--model-load-thread-count=4"]
    with NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live") as server:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            started = time.monotonic()
            loads = [pool.submit(load, server.url, f"slow_{i}") for i in range(4)]
            time.sleep(1.0)
            states = {e["name"]: e.get("state") for e in index(server.url)}
            assert states == {f"slow_{i}": "LOADING" for i in range(4)}
            assert requests.get(server.url + "/v2/health/ready").status_code == 400
            assert [f.result().status_code for f in loads] == [200] * 4
            took = time.monotonic() - started
        # Four 2 s initializations one after the other would take 8 s.
        assert took < 6.0, took
        assert len(index(server.url, ready=True)) == 4


def test_missing_model_file_is_reported(explicit):
    folder = explicit.repository / "no_file"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(one_input_pbtxt("no_file"))
    (folder / "1").mkdir()
    reply = load(explicit.url, "no_file")  # Triton 2.51 never answers this one
    assert reply.status_code == 400
    assert "model.py" in reply.json()["error"]
    (entry,) = entries(explicit.url, "no_file")
    assert entry["state"] == "UNAVAILABLE" and "model.py" in entry["reason"]


def test_unload_with_a_body_that_is_not_json_is_refused(explicit):
    reply = post(explicit.url, "/v2/repository/models/no_such_model/unload", b"{bad")
    assert reply.status_code == 500
    assert "failed to parse the request JSON buffer" in reply.json()["error"]


def test_explicit_reload_follows_version_folders_and_policy(tmp_path):
    """version_policy all: a removed version folder leaves, an added one is started
    alone (the unchanged version keeps serving, not restarted)."""
    repo = tmp_path / "models"
    config = add_sub_pbtxt() + "\nversion_policy: { all: {} }\n"
    write_model(repo, "add_sub", config, ADD_SUB_MODEL, versions=(1, 2))
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    with NaiadServer(repo, log_dir=tmp_path, extra_args=args) as server:
        assert [e["version"] for e in index(server.url, ready=True)] == ["1", "2"]
        shutil.rmtree(repo / "add_sub" / "2")
        (repo / "add_sub" / "3").mkdir()
        (repo / "add_sub" / "3" / "model.py").write_text(ADD_SUB_MODEL)
        assert load(server.url, "add_sub").status_code == 200
        assert [e["version"] for e in index(server.url, ready=True)] == ["1", "3"]
        assert 'loading: add_sub versions 3"\n' in server.stderr_text()
        assert _infer(server.url, "add_sub", version="1").status_code == 200
        assert _infer(server.url, "add_sub", version="3").status_code == 200
        assert _infer(server.url, "add_sub", version="2").status_code in (400, 404)
        assert _infer(server.url, "add_sub").json()["model_version"] == "3"
        # Nothing changed: a second load does nothing (as Triton).
        assert load(server.url, "add_sub").status_code == 200
        assert server.stderr_text().count("loading: add_sub") == 2
