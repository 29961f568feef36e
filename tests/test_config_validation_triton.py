"""Differential: a config.pbtxt that parses but that Triton 2.51 refuses as it loads a
version (an input with `dims: [ -2 ]`, a KIND_GPU group on a host without GPUs) is a
version-level load failure on both servers: HTTP 400 "load failed for model 'X': version
N is at UNAVAILABLE state: Invalid argument: ...;" (one clause per version, one newline
at the end) and an index entry per version with that reason, at start-up as on a load.
A config that does not parse, one refused while polling (max_batch_size < 0) and a
checksum agent's refusal stay poll failures (500 "failed to load 'X', failed to poll
from model repository", Naiad adding the reason). Skips, saying why, when Triton is not
installed. gRPC: grpc_clients/test_grpc_config_validation_triton.py."""

from __future__ import annotations

import json
import time

import pytest
import requests
from checksum_support import write_model
from config_validation_support import (
    BAD_DIMS,
    OVERRIDE_BAD_DIMS,
    REFUSED_AT_POLL,
    REFUSED_PER_VERSION,
    clauses,
    refusal_repository,
    version_error,
)
from server_harness import NaiadServer
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]


def _load(url: str, name: str, config: dict | None = None) -> requests.Response:
    body = {"parameters": {"config": json.dumps(config)}} if config else None
    return requests.post(f"{url}/v2/repository/models/{name}/load", json=body, timeout=120)


def _loads(url: str, names: list[str]) -> dict[str, requests.Response]:
    """Each of `names` loaded; "override" loaded with OVERRIDE_BAD_DIMS."""
    answers = {name: _load(url, name) for name in names}
    answers["override"] = _load(url, "override", OVERRIDE_BAD_DIMS)
    return answers


def _index(url: str) -> list[dict]:
    return requests.post(url + "/v2/repository/index", timeout=30).json()


def _settled_index(url: str) -> list[dict]:
    deadline = time.monotonic() + 120
    while True:
        entries = _index(url)
        if not any(e.get("state") == "LOADING" for e in entries) or time.monotonic() > deadline:
            return entries
        time.sleep(0.1)


def _entries(index: list[dict], name: str) -> list[dict]:
    return [e for e in index if e["name"] == name]


def _expected_entries(name: str) -> list[dict]:
    versions, reason = REFUSED_PER_VERSION[name]
    return [
        {
            "name": name,
            "version": str(v),
            "state": "UNAVAILABLE",
            "reason": f"Invalid argument: {reason}",
        }
        for v in versions
    ]


def test_explicit_loads_are_refused_at_the_same_stage_as_triton(tmp_path):
    repo = refusal_repository(tmp_path)
    args = ["--model-control-mode=explicit"]
    names = [*REFUSED_PER_VERSION, *REFUSED_AT_POLL, "passive"]
    naiad = NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live")
    try:
        ours = _loads(naiad.url, names)
        our_index = _index(naiad.url)
    finally:
        naiad.stop()
    with TritonPeer(repo, tmp_path, args) as triton:
        theirs = _loads(triton.url, names)
        their_index = _index(triton.url)

    for name, (versions, reason) in REFUSED_PER_VERSION.items():
        expected = version_error(name, versions, reason)
        assert (ours[name].status_code, ours[name].json()) == (400, {"error": expected}), name
        assert theirs[name].status_code == 400, name
        # Triton lists the versions in the order their loads ended; Naiad ascending.
        assert clauses(theirs[name].json()["error"]) == clauses(expected), name
        assert _entries(their_index, name) == _expected_entries(name)
        assert _entries(our_index, name) == _expected_entries(name)

    # A config override is refused as the same config.pbtxt would be.
    reason = f"model input 'INPUT0' {BAD_DIMS} for override"
    expected = (400, {"error": version_error("override", [1], reason)})
    assert (theirs["override"].status_code, theirs["override"].json()) == expected
    assert (ours["override"].status_code, ours["override"].json()) == expected
    listed = [
        {
            "name": "override",
            "version": "1",
            "state": "UNAVAILABLE",
            "reason": f"Invalid argument: {reason}",
        }
    ]
    assert _entries(their_index, "override") == _entries(our_index, "override") == listed

    for name in REFUSED_AT_POLL:
        poll_failed = f"failed to load '{name}', failed to poll from model repository"
        assert (theirs[name].status_code, theirs[name].json()) == (500, {"error": poll_failed})
        assert ours[name].status_code == 500, name
        # Naiad adds the reason (docs/differences.md).
        assert ours[name].json()["error"].startswith(poll_failed + ": "), name
        assert _entries(their_index, name) == [{"name": name}]
        (entry,) = _entries(our_index, name)
        assert entry["state"] == "UNAVAILABLE" and "version" not in entry, entry
        assert ours[name].json()["error"].endswith(entry["reason"])

    # A field Naiad does not act on: Triton loads the model, Naiad refuses each version,
    # as a backend refusing a config would (field_support.py).
    assert theirs["passive"].status_code == 200
    assert ours["passive"].status_code == 400
    refused = ours["passive"].json()["error"]
    assert refused.startswith(
        "load failed for model 'passive': version 1 is at UNAVAILABLE state: Invalid argument: "
    )
    assert "instance_group.passive" in refused and refused.endswith(";\n")
    (entry,) = _entries(our_index, "passive")
    assert entry["version"] == "1" and entry["state"] == "UNAVAILABLE"
    assert refused.endswith(entry["reason"] + ";\n")


def _table_rows(log: str, name: str) -> list[str]:
    """The rows of model `name` in the model | version | status table of a start-up log,
    cells stripped."""
    rows = []
    for line in log.splitlines():
        cells = [c.strip() for c in line.strip().split("|")]
        if len(cells) == 5 and cells[1] == name:
            rows.append(" | ".join(cells[1:4]))
    return rows


def test_start_up_lists_the_refused_versions_as_triton(tmp_path):
    repo = refusal_repository(tmp_path)
    args = ["--model-control-mode=none", "--exit-on-error=false"]
    naiad = NaiadServer(repo, log_dir=tmp_path, extra_args=args).start(wait="live")
    try:
        our_index = _settled_index(naiad.url)
        naiad.stop()
        our_log = naiad.stderr_text() + naiad.stdout_text()
    finally:
        naiad.stop()
    with TritonPeer(repo, tmp_path, args) as triton:
        their_index = _settled_index(triton.url)
        their_log = triton.log_path.read_text()

    for name in REFUSED_PER_VERSION:
        assert _entries(their_index, name) == _expected_entries(name)
        assert _entries(our_index, name) == _expected_entries(name)
        assert _table_rows(our_log, name) == _table_rows(their_log, name) != []
    for name in REFUSED_AT_POLL:
        assert _entries(their_index, name) == [{"name": name}]
        assert _entries(our_index, name)[0]["state"] == "UNAVAILABLE"


def test_a_refused_version_stops_the_start_up_with_exit_on_error(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    folder = write_model(repo, "bad_dims")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 1 ] } ]", "dims: [ -2 ] } ]", 1))
    naiad = NaiadServer(repo, log_dir=tmp_path).start(wait=None)
    try:
        assert naiad.wait_exit(120) != 0
    finally:
        naiad.stop()
    assert "failed to load all models" in naiad.stderr_text() + naiad.stdout_text()
    # Triton exits too, before it is live, with the same words.
    with pytest.raises(RuntimeError, match="failed to load all models"):
        with TritonPeer(repo, tmp_path, []):
            pass
