"""Naiad and the real Triton 2.51 (its build reads S3) serving the same s3:// repository
from moto's S3 in server mode: the same answers to the same requests, and both refuse to
start on a bucket that does not exist."""

from __future__ import annotations

import pytest
import requests
from cloud_repository_support import S3, CloudServer, add_sub_files, serve_fails
from model_control_support import add_sub_json_request
from triton_peer import TritonPeer, needs_triton

pytest.importorskip("boto3")
pytest.importorskip("moto")
pytestmark = needs_triton


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s3 = S3(tmp_path_factory.mktemp("moto"))
    s3.upload("repo", add_sub_files())
    yield s3
    s3.server.stop()


def _triton(store, url: str, log_dir) -> TritonPeer:
    peer = TritonPeer(url, log_dir, ["--exit-on-error=true", "--exit-timeout-secs=5"])
    peer.env.update({k: v for k, v in store.env().items() if v is not None})
    return peer


def test_naiad_and_triton_answer_alike_from_the_same_bucket(store, tmp_path):
    url = store.url("repo")
    naiad = CloudServer([url], store.env(), log_dir=tmp_path)
    with naiad, _triton(store, url, tmp_path) as triton:
        triton.wait_ready(["add_sub"])
        for path, body in (
            ("/v2/models/add_sub/infer", add_sub_json_request(2.0)),
            ("/v2/repository/index", {}),
            ("/v2/models/add_sub", None),
        ):
            # Connection: close, so that Triton's shutdown waits for no idle connection.
            answers = [
                requests.request(
                    "POST" if body is not None else "GET",
                    server.url + path,
                    json=body,
                    headers={"Connection": "close"},
                    timeout=60,
                )
                for server in (naiad, triton)
            ]
            assert [a.status_code for a in answers] == [200, 200], path
            assert answers[0].json() == answers[1].json(), path


def test_both_refuse_to_start_on_a_missing_bucket(store, tmp_path):
    missing = store.url("repo", bucket="no-such-bucket")
    naiad_log = serve_fails([missing], store.env(), tmp_path)  # exit code 1
    assert "bucket 'no-such-bucket' does not exist" in naiad_log
    peer = _triton(store, missing, tmp_path)
    with pytest.raises(RuntimeError, match="tritonserver exited"):
        peer.__enter__()
    assert peer.process.wait(30) != 0
    assert "error: creating server" in peer.log_path.read_text()
