"""The rate limiter (--rate-limit=execution_count, csrc/core/rate_limiter.h) black-box: two
Python models sharing one resource of count 1 never execute at once under concurrent
load, and do with --rate-limit=off; a model asking for more than --rate-limit-resource
gives is refused at load with Triton 2.51's message, checked against the real Triton
where it is installed (tests/triton_peer.py)."""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import NaiadServer, metric_value
from triton_peer import TritonPeer, needs_triton

pytestmark = pytest.mark.timeout(300)

MODEL_PY = Path(__file__).parent / "rate_limit_models" / "model.py"


def _config(name: str, resources: str, priority: int = 0, more: str = "") -> str:
    limiter = f"rate_limiter {{ resources [ {resources} ] priority: {priority} }}"
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "WINDOW" data_type: TYPE_FP64 dims: [ 2 ] } ]\n'
        f"instance_group [ {{ count: 1 kind: KIND_CPU {limiter} }} ]\n{more}"
    )


def _repository(root: Path, models: dict[str, str]) -> Path:
    for name, resources in models.items():
        (root / name / "1").mkdir(parents=True)
        shutil.copy(MODEL_PY, root / name / "1" / "model.py")
        (root / name / "config.pbtxt").write_text(_config(name, resources))
    return root


SHARED = '{ name: "R" count: 1 }'


def _windows(url: str, per_model: int) -> dict[str, list[tuple[float, float]]]:
    """Sends `per_model` requests to each of rl_a and rl_b at once; their windows."""
    client = httpclient.InferenceServerClient(url.removeprefix("http://"), concurrency=8)
    try:
        value = httpclient.InferInput("IN", [1], "FP32")
        value.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        pending = [
            (model, client.async_infer(model, [value]))
            for _ in range(per_model)
            for model in ("rl_a", "rl_b")
        ]
        windows: dict[str, list[tuple[float, float]]] = {"rl_a": [], "rl_b": []}
        for model, request in pending:
            start, end = request.get_result().as_numpy("WINDOW")
            windows[model].append((float(start), float(end)))
        return windows
    finally:
        client.close()


def _overlaps(windows: dict[str, list[tuple[float, float]]]) -> int:
    return sum(
        1
        for a_start, a_end in windows["rl_a"]
        for b_start, b_end in windows["rl_b"]
        if a_start < b_end and b_start < a_end
    )


@pytest.fixture(scope="module")
def shared_repository(tmp_path_factory):
    return _repository(tmp_path_factory.mktemp("rate-limit"), {"rl_a": SHARED, "rl_b": SHARED})


def test_models_sharing_a_resource_of_one_never_execute_at_once(shared_repository, tmp_path):
    # The count defaults to the most any instance asks for: 1.
    with NaiadServer(
        shared_repository, log_dir=tmp_path, extra_args=["--rate-limit", "execution_count"]
    ) as server:
        windows = _windows(server.url, per_model=4)
    assert all(len(w) == 4 for w in windows.values())
    assert _overlaps(windows) == 0, windows
    # The executions ran one after the other: together they span all eight sleeps.
    every = sorted(w for ws in windows.values() for w in ws)
    assert every[-1][1] - every[0][0] >= 8 * 0.15


def test_rate_limit_off_ignores_the_resources(shared_repository, tmp_path):
    with NaiadServer(
        shared_repository, log_dir=tmp_path, extra_args=["--rate-limit=off"]
    ) as server:
        windows = _windows(server.url, per_model=4)
    assert _overlaps(windows) > 0, windows


REFUSAL_MODELS = {
    "rl_fits": '{ name: "R" count: 1 }',
    "rl_too_many": '{ name: "R" count: 2 }',
    "rl_global": '{ name: "R" global: true count: 1 }',
    "rl_unnamed": '{ name: "S" count: 1 }',
}
# Loaded in this order with --rate-limit-resource=R:1.
REFUSAL_LOADS = ["rl_fits", "rl_too_many", "rl_global", "rl_unnamed"]
REFUSAL_ARGS = ["--rate-limit=execution_count", "--rate-limit-resource=R:1"]


def _load_answers(url: str) -> list[tuple[int, dict]]:
    answers = []
    for name in REFUSAL_LOADS:
        reply = requests.post(f"{url}/v2/repository/models/{name}/load", timeout=120)
        answers.append((reply.status_code, reply.json() if reply.content else {}))
    index = requests.post(f"{url}/v2/repository/index", timeout=10).json()
    answers.append((0, {"index": index}))
    return answers


def _wait_triton_ready(triton) -> None:
    deadline = time.monotonic() + 60
    while not requests.get(triton.url + "/v2/health/ready", timeout=5).ok:
        assert time.monotonic() < deadline, "Triton never ready"
        time.sleep(0.2)


def _refusal_answers(tmp_path) -> tuple[Path, list[str], list]:
    repository = _repository(tmp_path / "repository", REFUSAL_MODELS)
    args = ["--model-control-mode=explicit", *REFUSAL_ARGS]
    with NaiadServer(repository, log_dir=tmp_path, extra_args=args) as server:
        return repository, args, _load_answers(server.url)


def test_instances_asking_more_than_given_are_refused_at_load(tmp_path):
    answers = _refusal_answers(tmp_path)[2]
    limited = (
        'Invalid argument: Resource count for "{}" is limited to {} which will prevent '
        "scheduling of one or more model instances, the minimum required count is {}"
    )
    assert answers[0] == (200, {})
    assert answers[1] == (
        400,
        {
            "error": "load failed for model 'rl_too_many': version 1 is at UNAVAILABLE "
            f"state: {limited.format('R', 1, 2)};\n"
        },
    )
    assert answers[2][1]["error"].endswith(
        'Invalid argument: Resource "R" is present as both global and device-specific '
        "resource in the model configuration.;\n"
    )
    # Once the flags name any resource, one they do not name has no copies.
    assert limited.format("S", 0, 1) in answers[3][1]["error"]


@needs_triton
def test_refusals_at_load_match_triton(tmp_path):
    repository, args, answers = _refusal_answers(tmp_path)
    with TritonPeer(repository, tmp_path, args) as triton:
        _wait_triton_ready(triton)
        assert _load_answers(triton.url) == answers


def test_rate_limit_flags_are_checked_as_tritonserver_does(tmp_path, shared_repository):
    for flag, message in [
        ("--rate-limit=sometimes", "invalid argument for --rate-limit"),
        (
            "--rate-limit-resource=R",
            "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
            "'<resource_name>:<count>'. Got R",
        ),
    ]:
        server = NaiadServer(shared_repository, log_dir=tmp_path, extra_args=[flag])
        server.start(wait=None)
        assert server.wait_exit(30) != 0
        assert message in server.stderr_text()


def test_a_model_without_resources_runs_beside_a_limited_one(tmp_path):
    # A model without rate_limiter config runs freely next to limited ones.
    repository = _repository(tmp_path / "repository", {"rl_a": SHARED, "rl_b": SHARED})
    config = (repository / "rl_b" / "config.pbtxt").read_text()
    config = config.replace(f" rate_limiter {{ resources [ {SHARED} ] priority: 0 }}", "")
    (repository / "rl_b" / "config.pbtxt").write_text(config)
    with NaiadServer(
        repository, log_dir=tmp_path, extra_args=["--rate-limit=execution_count"]
    ) as server:
        windows = _windows(server.url, per_model=3)
    assert all(len(w) == 3 for w in windows.values())
    assert _overlaps(windows) > 0, windows


def _staged_batch(url: str, root: Path, waiting) -> tuple[int, list]:
    """rl_hold executes, holding R, until the test removes its `hold` file; meanwhile
    one request to rl_grow (its batch of one waits for R), then five more. Each step
    waits for what the server shows (`waiting()`: rl_grow's requests queued), not for
    time. (rl_grow's execution count, its batch sizes). Requests go on threads of their
    own: tritonclient's async_infer sends nothing until the caller waits on a result."""
    hold = root / "rl_hold" / "hold"
    executing = root / "rl_hold" / "executing"
    hold.touch()

    def infer(model: str, shape: list) -> int:
        body = {"inputs": [{"name": "IN", "shape": shape, "datatype": "FP32", "data": [0.0]}]}
        return requests.post(f"{url}/v2/models/{model}/infer", json=body, timeout=120).status_code

    try:
        with ThreadPoolExecutor(7) as pool:
            held = pool.submit(infer, "rl_hold", [1])
            _wait_for(executing.exists, "rl_hold executing")
            pending = [pool.submit(infer, "rl_grow", [1, 1])]
            _wait_for(lambda: waiting() == 1, "rl_grow's first request staged")
            pending += [pool.submit(infer, "rl_grow", [1, 1]) for _ in range(5)]
            _wait_for(lambda: waiting() == 6, "rl_grow's six requests queued")
            hold.unlink()
            assert [request.result() for request in [held, *pending]] == [200] * 7
    finally:
        hold.unlink(missing_ok=True)  # never leave the instance held
    stats = requests.get(f"{url}/v2/models/rl_grow/stats", timeout=10).json()["model_stats"][0]
    sizes = sorted(b["batch_size"] for b in stats["batch_stats"])
    return int(stats["execution_count"]), sizes


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _pending_gauge(metrics_port: int, model: str):
    """The server's pending-request gauge of `model`: its requests accepted and not yet
    executing, those waiting for the rate limiter among them; read the same way from
    Naiad and from Triton."""
    series = f'nv_inference_pending_request_count{{model="{model}",version="1"}}'
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    return lambda: int(metric_value(requests.get(url, timeout=10).text, series))


def _staged_repository(tmp_path) -> Path:
    root = tmp_path / "repository"
    _repository(root, {"rl_hold": SHARED, "rl_grow": SHARED})
    held = 'parameters { key: "HOLD" value { string_value: "file" } }\n'
    (root / "rl_hold" / "config.pbtxt").write_text(_config("rl_hold", SHARED, more=held))
    grow = _config("rl_grow", SHARED, more="dynamic_batching { }\n")
    grow = grow.replace("max_batch_size: 0", "max_batch_size: 8")
    (root / "rl_grow" / "config.pbtxt").write_text(grow)
    return root


def test_a_staged_batch_grows_with_requests_that_arrive_meanwhile(tmp_path):
    """As Triton's dynamic batcher grows the payload waiting in its rate limiter: the
    six requests run as one batch once R is free."""
    root = _staged_repository(tmp_path)
    with NaiadServer(root, log_dir=tmp_path, extra_args=["--rate-limit=execution_count"]) as server:
        waiting = _pending_gauge(server.metrics_port, "rl_grow")
        assert _staged_batch(server.url, root, waiting) == (1, [6])
        assert waiting() == 0


@needs_triton
def test_a_staged_batch_grows_in_triton_too(tmp_path):
    root = _staged_repository(tmp_path)
    with TritonPeer(root, tmp_path, ["--rate-limit=execution_count"]) as triton:
        _wait_triton_ready(triton)
        waiting = _pending_gauge(triton.metrics_port, "rl_grow")
        assert _staged_batch(triton.url, root, waiting) == (1, [6])
        assert waiting() == 0
