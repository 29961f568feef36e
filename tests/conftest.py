"""Shared fixtures for the black-box server tests (tests/test_server_*.py).

Starting `naiad serve` costs a few seconds (one worker process per model instance), so the
two servers most tests talk to are started once per session and reused:

- `example_server`: the repository in model_repository/ (add_sub, identity_bytes)
- `models_server`:  the repository in tests/models/ (raiser, error_response, crasher, sleeper,
  view_probe, request_echo)
- `paired_servers`: two servers of one repository (the examples, error_response and
  tests/differential_models), the second with `--fast-lane=false`: the same request sent
  to both takes the infer fast lane on one and the general Python path on the other

Tests that stop or break a server start their own with `NaiadServer` (tests/server_harness.py).
"""

from __future__ import annotations

import os
from pathlib import Path

# grpcio's fork handlers wait for its threads to go idle before each fork(): a test
# process that starts a server (subprocess forks) while a gRPC client's threads are busy
# can hang there for good (seen in test_grpc_model_control). The children exec at once
# and never use gRPC, so fork support stays off in every test process.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

import pytest
import requests
from server_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    NaiadServer,
    make_repository,
    server_variants,
)

DIFFERENTIAL_MODELS = Path(__file__).resolve().parent / "differential_models"


# tritonclient.grpc and naiad.protos cannot share a process (grpc_clients/conftest.py):
# those tests run in a pytest of their own, with NAIAD_GRPC_CLIENT_TESTS set.
collect_ignore = [] if os.environ.get("NAIAD_GRPC_CLIENT_TESTS") else ["grpc_clients"]


def _start(tmp_path_factory, repository, name) -> NaiadServer:
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp(name), name=name)
    server.start(wait="ready", timeout=120)
    return server


@pytest.fixture(scope="session")
def example_server(tmp_path_factory):
    server = _start(tmp_path_factory, EXAMPLE_MODELS, "example")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def models_server(tmp_path_factory):
    server = _start(tmp_path_factory, TEST_MODELS, "testmodels")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def paired_servers(tmp_path_factory):
    """(lane server, general-path server) serving the same models."""
    models = {"add_sub": None, "identity_bytes": None, "error_response": None}
    models.update({p.name: p for p in DIFFERENTIAL_MODELS.iterdir() if p.is_dir()})
    repository = make_repository(tmp_path_factory.mktemp("paired") / "models", models)
    variants = (("lane", []), ("general", ["--fast-lane=false"]))
    with server_variants(tmp_path_factory, repository, variants) as servers:
        yield servers


@pytest.fixture(scope="session")
def http():
    """A `requests` session with keep-alive (one per test session)."""
    with requests.Session() as session:
        yield session
