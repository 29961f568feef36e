"""Differential: the same repository-extension requests to Naiad and to the real Triton
2.51 get the same status codes and the same index entries (name, version, state, and a
reason where Triton gives one). Skips, saying why, when Triton is not installed
(`make perf-tools`)."""

from __future__ import annotations

import json
import time

import pytest
import requests
from model_control_support import (
    ADD_SUB_MODEL,
    add_sub_config,
    add_sub_json_request,
    control_repository,
    file_parameter,
)
from server_harness import NaiadServer
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]


def _steps() -> list[tuple[str, str, object]]:
    """(method, path, body) in order; each is sent to both servers."""
    load = "/v2/repository/models/{}/load"
    override = add_sub_config(max_batch_size=8)
    renamed = add_sub_config("elsewhere")
    sent = {
        "parameters": {
            "config": json.dumps(add_sub_config("sent")),
            "file:1/model.py": file_parameter(ADD_SUB_MODEL),
        }
    }
    return [
        ("POST", "/v2/repository/index", None),
        ("POST", "/v2/repository/index", {"ready": True}),
        ("POST", "/v2/repository/index", {"ready": False}),
        ("POST", "/v2/repository/index", b"{bad"),
        ("POST", "/v2/repository/index", {"ready": "yes"}),
        ("GET", "/v2/repository/index", None),
        ("POST", load.format("add_sub"), None),
        ("POST", load.format("add_sub"), {}),
        ("POST", load.format("broken"), None),
        ("POST", load.format("init_fails"), None),
        ("GET", "/v2/health/ready", None),
        ("POST", load.format("no_such_model"), None),
        ("POST", load.format("other"), None),
        ("GET", "/v2/models/other/ready", None),
        ("POST", "/v2/repository/models/other/unload", None),
        ("GET", "/v2/models/other/ready", None),
        ("POST", "/v2/repository/models/no_such_model/unload", None),
        ("POST", "/v2/repository/models/init_fails/unload", None),
        ("GET", "/v2/health/ready", None),
        ("POST", load.format("add_sub"), b"{bad"),
        ("POST", load.format("add_sub"), {"parameters": 5}),
        ("POST", load.format("add_sub"), {"parameters": {"config": 5}}),
        ("POST", load.format("add_sub"), {"parameters": {"config": "{bad"}}),
        ("POST", load.format("add_sub"), {"parameters": {"config": json.dumps(renamed)}}),
        ("POST", load.format("add_sub"), {"parameters": {"config": json.dumps(override)}}),
        ("GET", "/v2/models/add_sub/config", None),
        ("POST", "/v2/models/add_sub/infer", add_sub_json_request(1.0)),
        ("POST", load.format("sent"), sent),
        ("POST", "/v2/models/sent/infer", add_sub_json_request(2.0)),
        ("POST", load.format("other"), {"parameters": {"file:1/model.py": "AAAA"}}),
        ("POST", "/v2/repository/models/add_sub", None),
        ("POST", "/v2/repository/models/add_sub/reload", None),
    ]


def _send(url: str, method: str, path: str, body) -> requests.Response:
    data = body if body is None or isinstance(body, bytes) else json.dumps(body)
    return requests.request(method, url + path, data=data, timeout=120)


def _settled_index(url: str) -> list[tuple]:
    """The index once no model is LOADING or UNLOADING (Triton unloads in the background),
    as (name, version, state, has reason)."""
    deadline = time.monotonic() + 30
    while True:
        entries = requests.post(url + "/v2/repository/index", timeout=30).json()
        busy = any(e.get("state") in ("LOADING", "UNLOADING") for e in entries)
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # Naiad adds a state and reason to a model whose config cannot be read, which Triton
    # lists by name alone (README: differences); compare versioned entries in full.
    return [
        (e["name"], e.get("version"), e.get("state"), "reason" in e)
        if "version" in e
        else (e["name"],)
        for e in entries
    ]


def _outcome(reply: requests.Response, path: str) -> tuple:
    outcome = (reply.status_code,)
    if path.endswith("/config") and reply.ok:
        outcome += (reply.json()["max_batch_size"],)
    if path.endswith("/infer") and reply.ok:
        outcome += (reply.json()["outputs"][0]["data"][0],)
    return outcome


def test_explicit_mode_matches_triton(tmp_path):
    repo = control_repository(tmp_path / "models")
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    naiad = NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live")
    try:
        with TritonPeer(repo, tmp_path, args) as triton:
            differences = []
            for method, path, body in _steps():
                ours = _send(naiad.url, method, path, body)
                theirs = _send(triton.url, method, path, body)
                if _outcome(ours, path) != _outcome(theirs, path):
                    differences.append(
                        f"{method} {path} {body!r:.80}: naiad {ours.status_code} {ours.text!r:.200}"
                        f" / triton {theirs.status_code} {theirs.text!r:.200}"
                    )
                if path.startswith("/v2/repository/models/"):
                    ours_index, theirs_index = _settled_index(naiad.url), _settled_index(triton.url)
                    if ours_index != theirs_index:
                        differences.append(
                            f"index after {method} {path}: {ours_index} / {theirs_index}"
                        )
            assert differences == [], "\n".join(differences)
    finally:
        naiad.stop()


def test_none_mode_matches_triton(tmp_path):
    repo = control_repository(tmp_path / "models")
    for name in ("broken", "init_fails"):  # both would stop a none-mode start-up
        for path in sorted((repo / name).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (repo / name).rmdir()
    naiad = NaiadServer(repo, log_dir=tmp_path).start()
    try:
        with TritonPeer(repo, tmp_path, []) as triton:
            for method, path, body in [
                ("POST", "/v2/repository/models/add_sub/load", None),
                ("POST", "/v2/repository/models/no_such_model/load", None),
                ("POST", "/v2/repository/models/add_sub/unload", None),
            ]:
                ours = _send(naiad.url, method, path, body)
                theirs = _send(triton.url, method, path, body)
                assert (ours.status_code, ours.json()) == (theirs.status_code, theirs.json())
            assert _settled_index(naiad.url) == _settled_index(triton.url)
    finally:
        naiad.stop()
