"""Differential: Python-based backends served by Naiad and by the real Triton 2.51 from the
same repository and backend (tests/python_based_backend_support.py): the models' states,
configs (auto-completed by the backend, `runtime: "model.py"`), metadata and answers must
be the same.

Triton finds its own `python` backend (libtriton_python.so and the stub, which a
Python-based backend runs on) in its --backend-directory too, so the folder given to both
holds the test's `scale` backend beside a link to the peer's `python` folder; Naiad's
Python backend is built in and ignores the link.

Left out on purpose: the reason of a model naming a backend that no folder provides
(Triton: "unable to find backend library for backend 'nosuch', try specifying runtime on
the model configuration."; Naiad keeps its own message, which names the backends it has
and the model.py it looked for). Only its state is compared.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from python_based_backend_support import infer_body, write_backend, write_repository
from server_harness import NaiadServer
from triton_peer import TritonPeer, find_triton, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

TIMEOUT = 30
MODELS = ("double", "triple")


def _peer_python_backend() -> Path:
    prefix, _ = find_triton()
    flag = next(arg for arg in prefix if arg.startswith("--backend-directory="))
    return Path(flag.split("=", 1)[1]) / "python"


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    root = tmp_path_factory.mktemp("python_based_triton")
    backends = root / "backends"
    write_backend(backends)
    (backends / "python").symlink_to(_peer_python_backend(), target_is_directory=True)
    return backends, write_repository(root / "models")


@pytest.fixture(scope="module")
def servers(layout, tmp_path_factory):
    backends, repository = layout
    logs = tmp_path_factory.mktemp("logs")
    # The later --backend-directory replaces the peer's own (its prefix names one).
    flags = [
        f"--backend-directory={backends}",
        "--exit-on-error=false",
        "--strict-readiness=false",
    ]
    with TritonPeer(repository, logs, flags) as triton:
        triton.wait_ready(MODELS)
        with NaiadServer(repository, log_dir=logs, extra_args=flags) as naiad:
            yield naiad.url, triton.url


def _both(servers, method: str, path: str, **kwargs):
    return [requests.request(method, url + path, timeout=TIMEOUT, **kwargs) for url in servers]


def test_the_index_has_the_same_states(servers):
    naiad, triton = (
        {entry["name"]: entry["state"] for entry in answer.json()}
        for answer in _both(servers, "POST", "/v2/repository/index", json={})
    )
    assert naiad == triton == {"double": "READY", "triple": "READY", "ghost": "UNAVAILABLE"}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("what", ["config", "metadata"])
def test_config_and_metadata_are_the_same(servers, model, what):
    path = f"/v2/models/{model}" + ("/config" if what == "config" else "")
    naiad, triton = _both(servers, "GET", path)
    assert (naiad.status_code, naiad.json()) == (triton.status_code, triton.json())


@pytest.mark.parametrize("model", MODELS)
def test_answers_are_the_same(servers, model):
    naiad, triton = _both(servers, "POST", f"/v2/models/{model}/infer", json=infer_body(model))
    assert naiad.status_code == triton.status_code == 200, (naiad.text, triton.text)
    # WHO holds the model's folders: the same repository for both servers.
    assert naiad.json() == triton.json()
