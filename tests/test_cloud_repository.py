"""s3:// model repositories against a real S3 protocol server: moto in server mode, started
on a free port, checking every request's signature against keys made through its IAM.

Black-box: naiad serve is started with s3:// paths (Triton's s3://host:port/bucket/path
form), models are uploaded with boto3, and the server is checked with tritonclient (HTTP
here, gRPC in grpc_clients/test_cloud_repository_grpc.py), the repository API and its
cache folder (TRITON_AWS_MOUNT_DIRECTORY).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient
from cloud_repository_support import (
    BUCKET,
    S3,
    CloudServer,
    add_sub_files,
    files_under,
    serve_fails,
    wait_until,
)
from model_control_support import (
    ADD_SUB_MODEL,
    ConstantLoad,
    add_sub_client_inputs,
    add_sub_config,
    add_sub_pbtxt,
    entries,
    file_parameter,
    index,
    load,
    unload,
    write_model,
)
from server_harness import free_port

pytest.importorskip("boto3")
pytest.importorskip("moto")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    store = S3(tmp_path_factory.mktemp("moto"))
    store.upload("poll", add_sub_files())
    store.upload("explicit", add_sub_files())
    yield store
    store.server.stop()


@pytest.fixture(scope="module")
def local_repository(tmp_path_factory):
    """A local repository served beside the bucket."""
    repo = tmp_path_factory.mktemp("local")
    write_model(repo, "local_add_sub", add_sub_pbtxt("local_add_sub"), ADD_SUB_MODEL)
    return repo


@pytest.fixture(scope="module")
def poll_server(s3, local_repository, tmp_path_factory):
    """Poll mode over the bucket's `poll/` folder and a local folder."""
    cache = tmp_path_factory.mktemp("poll-cache")
    server = CloudServer(
        [s3.url("poll"), str(local_repository)],
        {**s3.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(cache)},
        log_dir=tmp_path_factory.mktemp("poll-logs"),
        extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "1"],
    )
    server.cache = cache
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def explicit_server(s3, tmp_path_factory):
    """Explicit mode; the credentials come from TRITON_CLOUD_CREDENTIAL_PATH (the longest
    matching entry), while the environment's are wrong."""
    cache = tmp_path_factory.mktemp("explicit-cache")
    credentials = tmp_path_factory.mktemp("credentials") / "cloud_credential.json"
    wrong = {"key_id": "nobody", "secret_key": "nothing", "region": "us-east-1"}
    right = {"key_id": s3.key_id, "secret_key": s3.secret, "region": "us-east-1"}
    credentials.write_text(json.dumps({"s3": {"": wrong, s3.url("").rstrip("/"): right}}))
    server = CloudServer(
        [s3.url("explicit")],
        {
            "AWS_ACCESS_KEY_ID": "wrong",
            "AWS_SECRET_ACCESS_KEY": "wrong",
            "TRITON_CLOUD_CREDENTIAL_PATH": str(credentials),
            "TRITON_AWS_MOUNT_DIRECTORY": str(cache),
        },
        log_dir=tmp_path_factory.mktemp("explicit-logs"),
        extra_args=["--model-control-mode", "explicit"],
    )
    server.cache = cache
    server.start()
    yield server
    server.stop()


def _add_sub_answers(server, model: str = "add_sub") -> list[np.ndarray]:
    """OUTPUT0 of a tritonclient HTTP request (INPUT0 = 3, INPUT1 = 1); gRPC's is in
    grpc_clients/test_cloud_repository_grpc.py (tritonclient.grpc needs a pytest of its
    own)."""
    client = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    try:
        result = client.infer(model, add_sub_client_inputs(httpclient, 3.0))
        return [result.as_numpy("OUTPUT0")]
    finally:
        client.close()


def _ready_versions(server, name: str) -> list[str]:
    return sorted(e["version"] for e in entries(server.url, name) if e.get("state") == "READY")


# -- poll mode ---------------------------------------------------------------------------
def test_a_model_from_s3_answers_tritonclient_beside_a_local_one(poll_server):
    for model in ("add_sub", "local_add_sub"):
        for output in _add_sub_answers(poll_server, model):
            np.testing.assert_array_equal(output, np.full((1, 16), 4.0, np.float32))
    assert {(e["name"], e.get("state")) for e in index(poll_server.url)} == {
        ("add_sub", "READY"),
        ("local_add_sub", "READY"),
    }
    # The model is served from its copy in the cache folder.
    assert files_under(poll_server.cache) == [
        "repository-0",
        "repository-0/add_sub",
        "repository-0/add_sub/1",
        "repository-0/add_sub/1/model.py",
        "repository-0/add_sub/config.pbtxt",
    ]


def test_poll_loads_a_model_uploaded_and_a_new_version(poll_server, s3):
    s3.upload("poll", add_sub_files("add_sub_new"))
    wait_until(lambda: _ready_versions(poll_server, "add_sub_new") == ["1"], "add_sub_new")
    for output in _add_sub_answers(poll_server, "add_sub_new"):
        np.testing.assert_array_equal(output, np.full((1, 16), 4.0, np.float32))

    # Version 2 of add_sub: the default policy serves the latest version only.
    s3.upload("poll", {"add_sub/2/model.py": ADD_SUB_MODEL.encode()})
    wait_until(lambda: _ready_versions(poll_server, "add_sub") == ["2"], "add_sub version 2")
    assert (poll_server.cache / "repository-0/add_sub/2/model.py").is_file()


def test_poll_unloads_a_model_removed_from_the_bucket(poll_server, s3):
    s3.upload("poll", add_sub_files("add_sub_gone"))
    wait_until(lambda: _ready_versions(poll_server, "add_sub_gone") == ["1"], "add_sub_gone")
    assert (poll_server.cache / "repository-0/add_sub_gone").is_dir()
    s3.delete("poll/add_sub_gone")
    wait_until(lambda: not entries(poll_server.url, "add_sub_gone"), "add_sub_gone to go")
    # The index drops it as soon as the bucket's listing does; the copy goes once its
    # instance has stopped.
    wait_until(
        lambda: not (poll_server.cache / "repository-0/add_sub_gone").exists(), "its copy to go"
    )
    assert _ready_versions(poll_server, "add_sub") != []  # the others stay


def test_the_cache_folder_is_empty_after_shutdown(poll_server):
    assert (poll_server.cache / "repository-0/add_sub").is_dir()
    assert poll_server.stop() == 0
    assert files_under(poll_server.cache) == []


# -- explicit mode -------------------------------------------------------------------------
def test_explicit_load_and_unload_of_a_remote_model(explicit_server):
    assert index(explicit_server.url) == [{"name": "add_sub"}]
    assert files_under(explicit_server.cache) == ["repository-0"]  # nothing loaded yet

    reply = load(explicit_server.url, "add_sub")
    assert reply.status_code == 200, reply.text
    for output in _add_sub_answers(explicit_server):
        np.testing.assert_array_equal(output, np.full((1, 16), 4.0, np.float32))
    assert (explicit_server.cache / "repository-0/add_sub/config.pbtxt").is_file()

    reply = unload(explicit_server.url, "add_sub")
    assert reply.status_code == 200, reply.text
    wait_until(lambda: _ready_versions(explicit_server, "add_sub") == [], "the unload")
    wait_until(lambda: files_under(explicit_server.cache) == ["repository-0"], "the copy to go")


def test_explicit_load_sees_a_model_uploaded_after_start(explicit_server, s3):
    s3.upload("explicit", add_sub_files("add_sub_late"))
    reply = load(explicit_server.url, "add_sub_late")
    assert reply.status_code == 200, reply.text
    for output in _add_sub_answers(explicit_server, "add_sub_late"):
        np.testing.assert_array_equal(output, np.full((1, 16), 4.0, np.float32))
    assert unload(explicit_server.url, "add_sub_late").status_code == 200


def test_reload_of_a_changed_remote_model_drops_no_request(explicit_server, s3):
    assert load(explicit_server.url, "add_sub").status_code == 200
    with ConstantLoad(explicit_server.url) as traffic:
        wait_until(lambda: traffic.ok > 20, "requests before the reload")
        # The model's code changes in the bucket: the reload starts it again.
        changed = ADD_SUB_MODEL + "\n# changed in the bucket\n"
        s3.upload("explicit", {"add_sub/1/model.py": changed.encode()})
        reply = load(explicit_server.url, "add_sub")
        assert reply.status_code == 200, reply.text
        before = traffic.ok
        wait_until(lambda: traffic.ok > before + 20, "requests after the reload")
    assert traffic.failures == []
    copy = explicit_server.cache / "repository-0/add_sub/1/model.py"
    assert copy.read_text() == changed


def test_file_override_of_a_remote_model(explicit_server):
    """`file:` parameters replace the model's files for this load: here add_sub's code
    with OUTPUT0 = INPUT0 * INPUT1 (3 * 1)."""
    multiplying = ADD_SUB_MODEL.replace("(in_0 + in_1)", "(in_0 * in_1)")
    assert multiplying != ADD_SUB_MODEL
    reply = load(
        explicit_server.url,
        "add_sub",
        {"config": json.dumps(add_sub_config()), "file:1/model.py": file_parameter(multiplying)},
    )
    assert reply.status_code == 200, reply.text
    for output in _add_sub_answers(explicit_server):
        np.testing.assert_array_equal(output, np.full((1, 16), 3.0, np.float32))
    assert unload(explicit_server.url, "add_sub").status_code == 200
    wait_until(lambda: files_under(explicit_server.cache) == ["repository-0"], "the copy to go")


# -- repositories that cannot be read -------------------------------------------------------
def test_start_up_stops_naming_the_repository_that_cannot_be_read(s3, tmp_path):
    url = s3.url("poll")
    refused = serve_fails([url], {**s3.env(), "AWS_SECRET_ACCESS_KEY": "wrong"}, tmp_path)
    assert f"model repository '{url}': the credentials were refused (SignatureDoesNotMatch)" in (
        refused
    )
    unknown = serve_fails([url], {**s3.env(), "AWS_ACCESS_KEY_ID": "AKIANOBODY"}, tmp_path)
    assert f"model repository '{url}': the credentials were refused (InvalidAccessKeyId)" in (
        unknown
    )
    missing = s3.url("poll", bucket="no-such-bucket")
    assert f"model repository '{missing}': bucket 'no-such-bucket' does not exist" in (
        serve_fails([missing], s3.env(), tmp_path)
    )
    port = free_port()  # nothing listens there
    down = f"s3://127.0.0.1:{port}/{BUCKET}/poll"
    assert f"model repository '{down}': cannot connect to http://127.0.0.1:{port}" in (
        serve_fails([down], s3.env(), tmp_path)
    )


def test_poll_keeps_serving_when_the_endpoint_goes_down(tmp_path):
    """Its own S3 server, stopped under a polling naiad: the error is logged naming the
    repository, and the model keeps answering."""
    store = S3(tmp_path)
    try:
        store.upload("repo", add_sub_files())
        server = CloudServer(
            [store.url("repo")],
            {**store.env(), "TRITON_AWS_MOUNT_DIRECTORY": str(tmp_path)},
            log_dir=tmp_path,
            extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "1"],
        )
        with server.start():
            store.server.stop()
            expected = (
                f"model repository '{store.url('repo')}': cannot connect to "
                f"{store.endpoint}; its models keep serving"
            )
            wait_until(lambda: expected in server.stderr_text(), "the poll error")
            for output in _add_sub_answers(server):
                np.testing.assert_array_equal(output, np.full((1, 16), 4.0, np.float32))
            assert _ready_versions(server, "add_sub") == ["1"]
    finally:
        store.server.stop()
