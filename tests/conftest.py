"""Shared fixtures for the black-box server tests (tests/test_server_*.py).

Starting `naiad serve` costs a few seconds (one worker process per model instance), so the
two servers most tests talk to are started once per session and reused:

- `example_server`: the repository in model_repository/ (add_sub, identity_bytes)
- `models_server`:  the repository in tests/models/ (raiser, error_response, crasher, sleeper,
  view_probe, request_echo)

Tests that stop or break a server start their own with `NaiadServer` (tests/server_harness.py).
"""

from __future__ import annotations

import pytest
import requests
from server_harness import EXAMPLE_MODELS, TEST_MODELS, NaiadServer


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
def http():
    """A `requests` session with keep-alive (one per test session)."""
    with requests.Session() as session:
        yield session
