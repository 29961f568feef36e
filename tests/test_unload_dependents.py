"""Explicit model control around an ensemble, as Triton 2.51's: loading the ensemble
loads its composing models; unloading it with `unload_dependents` unloads them too,
except one another loaded ensemble uses; without it they stay
(repository/control.py)."""

from __future__ import annotations

from pathlib import Path

import requests
from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository

PIPELINES = Path(__file__).resolve().parent / "pipeline_models"


def _ready(server, model: str) -> bool:
    return requests.get(f"{server.url}/v2/models/{model}/ready", timeout=10).status_code == 200


def _unload(server, model: str, dependents: bool) -> None:
    body = {"parameters": {"unload_dependents": dependents}}
    reply = requests.post(
        f"{server.url}/v2/repository/models/{model}/unload", json=body, timeout=60
    )
    assert reply.status_code == 200, reply.text


def _load(server, model: str) -> None:
    reply = requests.post(f"{server.url}/v2/repository/models/{model}/load", timeout=60)
    assert reply.status_code == 200, reply.text


def test_an_ensembles_composing_models_follow_it(tmp_path):
    repository = make_repository(
        tmp_path / "models",
        {
            "add_sub": EXAMPLE_MODELS / "add_sub",
            "ensemble_add_sub": PIPELINES / "ensemble_add_sub",
            "ens_nested": PIPELINES / "ens_nested",
        },
    )
    flags = ["--model-control-mode=explicit", "--load-model=ensemble_add_sub"]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=flags) as server:
        assert _ready(server, "ensemble_add_sub") and _ready(server, "add_sub")
        _unload(server, "ensemble_add_sub", dependents=False)
        assert _ready(server, "add_sub")
        _load(server, "ensemble_add_sub")
        _unload(server, "ensemble_add_sub", dependents=True)
        assert not _ready(server, "add_sub")
        # ens_nested uses ensemble_add_sub and add_sub: unloading ensemble_add_sub with
        # its dependents leaves add_sub, which ens_nested still uses.
        _load(server, "ens_nested")
        assert _ready(server, "ensemble_add_sub") and _ready(server, "add_sub")
        _unload(server, "ensemble_add_sub", dependents=True)
        assert _ready(server, "add_sub")
        _unload(server, "ens_nested", dependents=True)
        assert not _ready(server, "add_sub") and not _ready(server, "ens_nested")
