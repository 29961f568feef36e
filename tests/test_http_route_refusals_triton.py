"""Differential: requests to a KServe route with the wrong method, or to no route, sent
to Naiad and to Triton 2.51: the same status, Content-Type and body. Triton's handlers
differ in Content-Type (health, model ready and infer answer 405 as text/plain, the
others as JSON; unknown trace paths 404 as text/plain), and clients that read the type
see it. (The reason phrase is left out: Triton's server writes "Not Allowed".) Skips,
saying why, when Triton is not installed."""

from __future__ import annotations

import pytest
import requests
from server_harness import NaiadServer, make_repository
from triton_peer import TritonPeer, needs_triton

pytestmark = [pytest.mark.timeout(300), needs_triton]

REQUESTS = [
    "PUT /v2",
    "PUT /v2/health/live",
    "POST /v2/health/ready",
    "GET /v2/nothing",
    "PUT /v2/models/stats",
    "PUT /v2/models/add_sub",
    "PUT /v2/models/add_sub/ready",
    "PUT /v2/models/add_sub/versions/1/ready",
    "PUT /v2/models/add_sub/config",
    "PUT /v2/models/add_sub/stats",
    "GET /v2/models/add_sub/infer",
    "DELETE /v2/models/add_sub/versions/1/infer",
    "GET /v2/models/add_sub/nothing",
    "GET /v2/models/add_sub/generate",
    "GET /v2/repository/index",
    "GET /v2/repository/models/add_sub/load",
    "PUT /v2/logging",
    "GET /v2/logging/x",
    "PUT /v2/trace/setting",
    "GET /v2/trace",
    "GET /v2/trace/x",
    "PUT /v2/models/add_sub/trace/setting",
    "POST /v2/systemsharedmemory/status",
    "GET /v2/systemsharedmemory/region/r/register",
    "PUT /v2/cudasharedmemory/status",
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("route-refusals")
    repository = make_repository(root / "models", ["add_sub"])
    with NaiadServer(repository, log_dir=root) as naiad, TritonPeer(repository, root, []) as triton:
        triton.wait_ready(["add_sub"])
        yield naiad, triton


def _answer(url: str, line: str) -> tuple[int, str, bytes]:
    method, path = line.split()
    reply = requests.request(method, url + path, data=b"", timeout=30)
    return reply.status_code, reply.headers.get("Content-Type"), reply.content


def test_wrong_methods_and_unknown_paths_are_answered_as_triton(servers):
    naiad, triton = servers
    ours = {line: _answer(naiad.url, line) for line in REQUESTS}
    theirs = {line: _answer(triton.url, line) for line in REQUESTS}
    assert ours == theirs
    assert {status for status, _, _ in ours.values()} == {404, 405}
