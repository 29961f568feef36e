"""Differential: ensembles and BLS on Naiad and on the real Triton 2.51, same repository,
same requests: the same outputs, status codes and messages, the same load answers for
ensembles that must not load, and the same statistics counts on the composing model.
Skips, saying why, when Triton is not installed (`make perf-tools`).

Left out on purpose (Triton 2.51 hangs, differs or lacks it, README "Differences"): a
model calling itself, a BLS timeout, ResponseIterator.cancel() (python_backend 25.05+),
string correlation ids (Triton 2.51 fails every request of a TYPE_STRING CORRID model).
"""

from __future__ import annotations

import numpy as np
import pytest
import requests
from server_harness import NaiadServer
from test_ensemble_reload import (
    EXPECTED_FAILED_AT_START,
    EXPECTED_STORY,
    EXPLICIT,
    EXPLICIT_FAILING,
    failed_at_start_story,
    reload_repository,
    reload_story,
    set_repeat_decoupled,
    settled_start,
    without_ens_mix,
)
from test_pipelines import (
    BAD_ENSEMBLES,
    BLS_SEQUENCE_STEPS,
    ENSEMBLE_SEQUENCES,
    bls_sequence,
    build_repository,
    infer,
    model_counts,
)
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(600),
    needs_triton,
]

TIMEOUT = 30
LOADED = [
    "add_sub",
    "bls",
    "ensemble_add_sub",
    "ensemble_bls",
    "seq_echo",
    "ens_seq_echo",
    "bls_sequence",
    "int_double",
    "repeat",
    "ens_decoupled",
    "ens_decoupled_unmarked",
    "ens_add_sub_marked",
    "ens_nested",
    "ens_nested_deep",
]
ARGS = ["--model-control-mode=explicit", *(f"--load-model={m}" for m in LOADED)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("pipelines-diff"))
    logs = tmp_path_factory.mktemp("pipelines-diff-logs")
    with NaiadServer(repository, log_dir=logs, name="naiad-diff", extra_args=ARGS) as naiad:
        with TritonPeer(repository, logs, ARGS) as triton:
            yield naiad, triton


REQUESTS = [
    ("ensemble_add_sub", None),
    ("bls", {"mode": "sync"}),
    ("bls", {"mode": "async"}),
    ("bls", {"mode": "decoupled"}),
    ("bls", {"mode": "ensemble"}),
    ("bls", {"mode": "target", "target": "add_sub", "version": 1}),
    ("bls", {"mode": "target", "target": "nope"}),
    ("bls", {"mode": "target", "target": "add_sub", "version": 7}),
    ("bls", {"mode": "bad_input"}),
    ("bls", {"mode": "fail"}),
    ("ensemble_bls", {"mode": "sync"}),
    ("ensemble_bls", {"mode": "fail"}),
    ("bls", {"mode": "bad_shape"}),
    ("ens_nested", None),
    ("ens_nested_deep", None),
]


def _add_sub_successes(server) -> int:
    stats = requests.get(f"{server.url}/v2/models/add_sub/stats", timeout=TIMEOUT).json()
    return stats["model_stats"][0]["inference_stats"]["success"]["count"]


def test_same_answers_and_statistics(servers):
    naiad, triton = servers
    counts = [_add_sub_successes(s) for s in servers]
    bls_before = [model_counts(s, "bls") for s in servers]
    for model, parameters in REQUESTS:
        n_status, n_payload, n_outputs = infer(naiad, model, parameters)
        t_status, t_payload, t_outputs = infer(triton, model, parameters)
        assert n_status == t_status, (model, parameters, n_payload, t_payload)
        if n_status != 200:
            assert n_payload == t_payload, (model, parameters)
            continue
        assert sorted(n_outputs) == sorted(t_outputs)
        for name in n_outputs:
            assert (n_outputs[name] == t_outputs[name]).all(), (model, parameters, name)
    # add_sub ran the same requests on both: ensemble steps (nested ones too) and BLS
    # calls included.
    assert [_add_sub_successes(s) - c for s, c in zip(servers, counts)] == [15, 15]
    # bls's own counts: its error responses (a failed call's error passed on, mode fail)
    # are successes, as Triton's Python backend counts them.
    bls_changes = [
        tuple(a - b for a, b in zip(model_counts(s, "bls"), before))
        for s, before in zip(servers, bls_before)
    ]
    assert bls_changes[0] == bls_changes[1], bls_changes
    assert bls_changes[0][1] == 0


def test_ensemble_responses_say_their_sequence_as_triton(servers):
    # Triton writes the three parameters once per output (the same keys again); a JSON
    # parser keeps one of each, as a client sees them.
    for model, parameters, expected in [
        *ENSEMBLE_SEQUENCES,
        ("ens_seq_echo", {"sequence_id": 31, "sequence_start": True}, None),
        ("ens_seq_echo", {"sequence_id": 31, "sequence_end": True}, None),
        ("add_sub", {"sequence_id": 3}, None),
        ("bls", {"mode": "ensemble", "sequence_id": 3}, None),
    ]:
        answers = []
        for server in servers:
            if model == "ens_seq_echo":
                body = {
                    "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [2]}]
                }
                body["parameters"] = parameters
                r = requests.post(
                    f"{server.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT
                )
                status, payload = r.status_code, r.json()
            else:
                status, payload, _ = infer(server, model, parameters)
            answers.append((status, payload.get("parameters")))
        assert answers[0] == answers[1], (model, parameters)
        if expected is not None:
            assert answers[0] == (200, expected)


def test_bls_calls_to_a_sequence_model_answer_as_triton(servers):
    for value, parameters, expected in BLS_SEQUENCE_STEPS:
        answers = [bls_sequence(s, value, parameters) for s in servers]
        assert answers == [expected, expected], (value, parameters)


def test_failed_bls_calls_count_in_the_called_models_statistics_as_triton(servers):
    changes = []
    for server in servers:
        before = {m: model_counts(server, m) for m in ("int_double", "add_sub")}
        for mode in ("raise_target", "bad_shape"):
            assert infer(server, "bls", {"mode": mode})[0] == 500
        after = {m: model_counts(server, m) for m in before}
        changes.append({m: tuple(a - b for a, b in zip(after[m], before[m])) for m in before})
    # int_double failed the call (one failure, one execution); add_sub never saw its own.
    assert changes == [{"int_double": (0, 1, 1), "add_sub": (0, 0, 0)}] * 2


def _config_policies(servers, model: str) -> list:
    return [
        requests.get(f"{s.url}/v2/models/{model}/config", timeout=TIMEOUT)
        .json()
        .get("model_transaction_policy")
        for s in servers
    ]


@pytest.mark.parametrize("model", ["ens_decoupled", "ens_decoupled_unmarked"])
def test_a_decoupled_ensemble_is_refused_by_infer_as_triton(servers, model):
    # Also one whose config does not say so (a step is): both give it back decoupled.
    assert _config_policies(servers, model) == [{"decoupled": True}] * 2
    n = {"inputs": [{"name": "N", "shape": [1], "datatype": "INT32", "data": [3]}]}
    answers = [
        requests.post(f"{s.url}/v2/models/{model}/infer", json=n, timeout=TIMEOUT) for s in servers
    ]
    assert [a.status_code for a in answers] == [501, 501]
    assert answers[0].json() == answers[1].json()


def test_an_ensemble_without_a_decoupled_step_is_not_decoupled_as_triton(servers):
    # Its config says decoupled: both clear it and serve /infer with the same outputs.
    assert _config_policies(servers, "ens_add_sub_marked") == [{"decoupled": False}] * 2
    (n_status, _p, n_outputs), (t_status, t_payload, t_outputs) = [
        infer(s, "ens_add_sub_marked") for s in servers
    ]
    assert (n_status, t_status) == (200, 200), t_payload
    assert n_outputs.keys() == t_outputs.keys()
    for name, values in t_outputs.items():
        np.testing.assert_array_equal(n_outputs[name], values)


@pytest.mark.parametrize("name", sorted(BAD_ENSEMBLES))
def test_bad_ensembles_answer_the_load_as_triton(servers, name):
    answers = [
        requests.post(f"{s.url}/v2/repository/models/{name}/load", timeout=TIMEOUT) for s in servers
    ]
    n, t = answers
    assert n.status_code == t.status_code
    if n.status_code == 400:  # the composing models do not fit: the same message
        assert n.json() == t.json()
    else:  # a structural error: Triton's words, Naiad adds the reason (README)
        assert n.json()["error"].startswith(t.json()["error"])
        assert n.json()["error"].endswith(BAD_ENSEMBLES[name][1])


def test_unloading_a_composing_model_makes_the_ensemble_unready_on_both(servers):
    for server in servers:
        ready = f"{server.url}/v2/models/ensemble_add_sub/ready"
        assert requests.get(ready, timeout=TIMEOUT).status_code == 200
    answers = [
        requests.post(f"{s.url}/v2/repository/models/add_sub/unload", timeout=TIMEOUT).status_code
        for s in servers
    ]
    assert answers == [200, 200]
    statuses = [infer(s, "ensemble_add_sub")[0] for s in servers]
    assert all(status != 200 for status in statuses)
    for server in servers:
        requests.post(f"{server.url}/v2/repository/models/add_sub/load", timeout=TIMEOUT)
    statuses = [infer(s, "ensemble_add_sub")[0] for s in servers]
    assert statuses == [200, 200], [infer(s, "ensemble_add_sub")[1] for s in servers]


def test_reloading_a_composing_model_loads_its_ensembles_again_as_triton(tmp_path):
    # Each server its own repository: the story rewrites repeat's config.
    stories = []
    naiad_repository = reload_repository(tmp_path / "naiad")
    with NaiadServer(naiad_repository, log_dir=tmp_path, extra_args=EXPLICIT) as naiad:
        stories.append(reload_story(naiad.url, naiad_repository))
    triton_repository = reload_repository(tmp_path / "triton")
    with TritonPeer(triton_repository, tmp_path, EXPLICIT) as triton:
        triton.wait_ready(["ens_repeat", "ens_mix"])
        stories.append(reload_story(f"http://127.0.0.1:{triton.http_port}", triton_repository))
    assert stories[0] == stories[1] == EXPECTED_STORY


@pytest.mark.parametrize(
    "model", ["ensemble_add_sub", "ens_nested", "ens_decoupled", "ens_add_sub_marked"]
)
def test_an_ensembles_config_is_tritons(servers, model):
    # All of it: the decoupled policy said also when false, no optimization block.
    configs = [
        requests.get(f"{server.url}/v2/models/{model}/config", timeout=TIMEOUT).json()
        for server in servers
    ]
    assert configs[0] == configs[1]


def test_an_ensemble_refused_at_start_up_stays_refused_as_triton(tmp_path):
    stories = []
    for name in ("naiad", "triton"):
        repository = reload_repository(tmp_path / name)
        set_repeat_decoupled(repository, True)
        if name == "naiad":
            server = NaiadServer(repository, log_dir=tmp_path, extra_args=EXPLICIT_FAILING)
            server.start(wait="live")
            try:
                settled_start(server.url)
                stories.append(failed_at_start_story(server.url, repository))
            finally:
                server.stop()
        else:
            with TritonPeer(repository, tmp_path, EXPLICIT_FAILING) as triton:
                settled_start(triton.url)
                stories.append(failed_at_start_story(triton.url, repository))
    assert stories[0] == EXPECTED_FAILED_AT_START
    assert without_ens_mix(stories[0]) == without_ens_mix(stories[1])
