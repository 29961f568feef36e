"""Ensembles meet a composing model as it is now: loading `repeat` again with its config
changed (decoupled or not) loads again the ensembles that use it, as Triton 2.51 does.
ens_repeat (repeat alone) follows repeat's decoupled setting; ens_mix (repeat beside
int_double, both fed by the request) cannot have a decoupled step, so it is unloaded
while repeat is decoupled and comes back when repeat is not.
tests/test_pipelines_triton.py runs the same story against Triton 2.51.
"""

from __future__ import annotations

import time
from pathlib import Path

import requests
from server_harness import NaiadServer, make_repository

TESTS = Path(__file__).resolve().parent
TIMEOUT = 30
EXPLICIT = ["--model-control-mode=explicit", "--load-model=*"]
# A model failing at start-up leaves the server up (and not ready, as Triton's).
EXPLICIT_FAILING = [*EXPLICIT, "--exit-on-error=false"]

ENS_MIX = """
name: "ens_mix"
platform: "ensemble"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "R" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "D" data_type: TYPE_INT32 dims: [ 1 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "repeat"
      model_version: -1
      input_map { key: "N" value: "N" }
      output_map { key: "OUT" value: "R" }
    },
    {
      model_name: "int_double"
      model_version: -1
      input_map { key: "X" value: "N" }
      output_map { key: "Y" value: "D" }
    }
  ]
}
"""

# The load refusal (the index keeps saying "unloaded", as Triton's).
_MIX_REFUSED = (
    "in ensemble ens_mix, step of model 'ens_mix' receives inputs originated from "
    "different decoupled models"
)
_NOT_SERVED = {"error": "Request for unknown model: 'ens_mix' has no available versions"}
_DECOUPLED_REFUSED = {
    "error": "HTTP end point doesn't support models with decoupled transaction policy"
}


def reload_repository(dest: Path) -> Path:
    """repeat (not decoupled, to start with), int_double, ens_repeat and ens_mix."""
    repository = make_repository(
        dest,
        {
            "repeat": TESTS / "decoupled_models" / "repeat",
            "int_double": TESTS / "pipeline_models" / "int_double",
            "ens_repeat": TESTS / "pipeline_models" / "ens_repeat",
        },
    )
    (repository / "ens_mix" / "1").mkdir(parents=True)
    (repository / "ens_mix" / "config.pbtxt").write_text(ENS_MIX)
    set_repeat_decoupled(repository, False)
    return repository


def set_repeat_decoupled(repository: Path, decoupled: bool) -> None:
    config = repository / "repeat" / "config.pbtxt"
    text = config.read_text()
    for was in ("decoupled: true", "decoupled: false"):
        text = text.replace(was, f"decoupled: {str(decoupled).lower()}")
    config.write_text(text)


def _seen(url: str) -> dict:
    """What a client sees of the two ensembles: each one's config policy (or error) and
    readiness, and the repository index."""
    seen = {}
    for model in ("ens_repeat", "ens_mix"):
        config = requests.get(f"{url}/v2/models/{model}/config", timeout=TIMEOUT)
        ready = requests.get(f"{url}/v2/models/{model}/ready", timeout=TIMEOUT)
        policy = config.json().get("model_transaction_policy") if config.ok else config.json()
        seen[model] = (config.status_code, policy, ready.status_code)
    index = requests.post(f"{url}/v2/repository/index", json={}, timeout=TIMEOUT).json()
    seen["index"] = sorted((m["name"], m.get("state", ""), m.get("reason", "")) for m in index)
    return seen


def _load(url: str, model: str) -> tuple:
    r = requests.post(f"{url}/v2/repository/models/{model}/load", json={}, timeout=TIMEOUT)
    return r.status_code, r.json() if r.content else None


def _infer(url: str, model: str) -> tuple:
    """(status, outputs by name, or the error) of N = 1 (repeat's default mode: a
    response from a thread, then the final flag alone)."""
    n = [{"name": "N", "shape": [1], "datatype": "INT32", "data": [1]}]
    r = requests.post(f"{url}/v2/models/{model}/infer", json={"inputs": n}, timeout=TIMEOUT)
    payload = r.json()
    if r.status_code != 200:
        return r.status_code, payload
    return 200, {output["name"]: output["data"] for output in payload["outputs"]}


def settled_start(url: str) -> None:
    """Returns once start-up's loads are done: ens_repeat ready, ens_mix refused."""
    deadline = time.monotonic() + 60
    while True:
        try:
            index = requests.post(f"{url}/v2/repository/index", json={}, timeout=TIMEOUT).json()
            states = {m["name"]: m.get("state") for m in index}
            # Triton lists a refused ensemble by its name alone (README "Differences").
            if states.get("ens_repeat") == "READY" and states.get("ens_mix") in (
                "UNAVAILABLE",
                None,
            ):
                return
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, "start-up's loads did not settle"
        time.sleep(0.1)


def without_ens_mix(story: list) -> list:
    """The story without what is seen of ens_mix: Triton lists an ensemble it refused at
    start-up by its name alone and calls it not found (README "Differences")."""
    out = []
    for step in story:
        if isinstance(step, dict):
            step = {
                "ens_repeat": step["ens_repeat"],
                "index": [entry for entry in step["index"] if entry[0] != "ens_mix"],
            }
        out.append(step)
    return out


def failed_at_start_story(url: str, repository: Path) -> list:
    """ens_mix refused at start-up (repeat decoupled), then repeat made not decoupled:
    an ensemble that never loaded is not loaded by its composing model's reload."""
    story = [_seen(url)]
    set_repeat_decoupled(repository, False)
    story += [_load(url, "repeat"), _seen(url)]
    return story


def reload_story(url: str, repository: Path) -> list:
    """What a client sees at each step: repeat not decoupled, then made decoupled, an
    attempt to load ens_mix, then repeat not decoupled again."""
    story = [_seen(url), _infer(url, "ens_repeat"), _infer(url, "ens_mix")]
    set_repeat_decoupled(repository, True)
    story += [_load(url, "repeat"), _seen(url), _infer(url, "ens_repeat")]
    story += [_load(url, "ens_mix"), _seen(url)]
    set_repeat_decoupled(repository, False)
    story += [_load(url, "repeat"), _seen(url), _infer(url, "ens_mix")]
    return story


# Triton 2.51's answers (tests/test_pipelines_triton.py compares them live).
SERVING = {
    "ens_repeat": (200, {"decoupled": False}, 200),
    "ens_mix": (200, {"decoupled": False}, 200),
}


def _seen_as(ens_repeat: tuple, ens_mix: tuple, mix_entry: tuple) -> dict:
    index = [
        ("ens_mix", *mix_entry),
        ("ens_repeat", "READY", ""),
        ("int_double", "READY", ""),
        ("repeat", "READY", ""),
    ]
    return {"ens_repeat": ens_repeat, "ens_mix": ens_mix, "index": sorted(index)}


BOTH_SERVED = _seen_as(SERVING["ens_repeat"], SERVING["ens_mix"], ("READY", ""))
MIX_UNFITTED = _seen_as(
    (200, {"decoupled": True}, 200), (404, _NOT_SERVED, 400), ("UNAVAILABLE", "unloaded")
)
EXPECTED_STORY = [
    BOTH_SERVED,
    (200, {"OUT": [0]}),  # repeat answering through its response sender, not decoupled
    (200, {"R": [0], "D": [2]}),
    (200, None),
    MIX_UNFITTED,
    (501, _DECOUPLED_REFUSED),
    (400, {"error": f"load failed for model 'ens_mix': {_MIX_REFUSED}\n"}),
    MIX_UNFITTED,
    (200, None),
    BOTH_SERVED,
    (200, {"R": [0], "D": [2]}),
]


EXPECTED_FAILED_AT_START = [
    _seen_as(
        (200, {"decoupled": True}, 200), (404, _NOT_SERVED, 400), ("UNAVAILABLE", _MIX_REFUSED)
    ),
    (200, None),
    _seen_as(SERVING["ens_repeat"], (404, _NOT_SERVED, 400), ("UNAVAILABLE", _MIX_REFUSED)),
]


def test_reloading_a_composing_model_loads_its_ensembles_again(tmp_path):
    repository = reload_repository(tmp_path / "models")
    with NaiadServer(repository, log_dir=tmp_path, extra_args=EXPLICIT) as naiad:
        assert reload_story(naiad.url, repository) == EXPECTED_STORY
        # The arena and in-flight counts back to rest: the replaced ensembles released.
        arena = requests.get(f"{naiad.url}/v2/naiad/arena", timeout=TIMEOUT).json()
        assert arena["requests_in_flight"] == 0


def test_unloading_an_unfitted_ensemble_keeps_it_unloaded(tmp_path):
    # An unload request forgets the ensemble: repeat's next reload leaves it alone.
    repository = reload_repository(tmp_path / "models")
    with NaiadServer(repository, log_dir=tmp_path, extra_args=EXPLICIT) as naiad:
        set_repeat_decoupled(repository, True)
        assert _load(naiad.url, "repeat") == (200, None)
        r = requests.post(f"{naiad.url}/v2/repository/models/ens_mix/unload", timeout=TIMEOUT)
        assert r.status_code == 200
        set_repeat_decoupled(repository, False)
        assert _load(naiad.url, "repeat") == (200, None)
        seen = _seen(naiad.url)
        assert seen["ens_mix"] == (404, _NOT_SERVED, 400)
        assert seen["ens_repeat"] == SERVING["ens_repeat"]


def test_an_ensemble_refused_at_start_up_stays_refused(tmp_path):
    repository = reload_repository(tmp_path / "models")
    set_repeat_decoupled(repository, True)
    naiad = NaiadServer(repository, log_dir=tmp_path, extra_args=EXPLICIT_FAILING)
    naiad.start(wait="live")
    try:
        settled_start(naiad.url)
        assert failed_at_start_story(naiad.url, repository) == EXPECTED_FAILED_AT_START
    finally:
        naiad.stop()
