"""Ensembles and BLS, black-box over HTTP (tests/grpc_clients/test_grpc_pipelines.py has
the gRPC side).

One `naiad serve` on add_sub (model_repository), the BLS model `bls` (its request
parameter `mode` picks what it calls: tests/pipeline_models/bls/1/model.py), the ensemble
`ensemble_add_sub` (add_sub twice: OUTPUT0 = 2 * INPUT0, OUTPUT1 = 2 * INPUT1),
slow_add_sub (one instance a test can hold busy) and ensembles that must not load; and
for BLS calls to sequence models, cancelled BLS streams and nested or decoupled
ensembles: seq_echo (and seq_echo_string, its TYPE_STRING-CORRID twin), ens_seq_echo,
bls_sequence, bls_cancel, the decoupled `repeat` (tests/decoupled_models), int_double,
ens_decoupled, ens_nested and ens_nested_deep; for the sequence parameters of ensemble
responses, sequence_override and ens_override (each folder's config says what it is).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from server_harness import EXAMPLE_MODELS, NaiadServer, metric_value
from shm_support import Region
from tritonclient.utils import InferenceServerException

PIPELINE_MODELS = Path(__file__).resolve().parent / "pipeline_models"
DECOUPLED_MODELS = Path(__file__).resolve().parent / "decoupled_models"
# Models of the BLS-sequence, BLS-cancel and nested/decoupled-ensemble tests.
MORE_MODELS = (
    "seq_echo",
    "ens_seq_echo",
    "bls_sequence",
    "bls_cancel",
    "int_double",
    "ens_decoupled",
    "ens_repeat",
    "ens_nested",
    "ens_nested_deep",
    "sequence_override",
    "ens_override",
)
TIMEOUT = 30

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 3.0, dtype=np.float32)

_ENSEMBLE_HEADER = """platform: "ensemble"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _step(model="add_sub", version=-1, inputs=None, outputs=None) -> str:
    inputs = inputs or {"INPUT0": "INPUT0", "INPUT1": "INPUT1"}
    outputs = outputs or {"OUTPUT0": "OUTPUT0"}
    text = f'{{ model_name: "{model}" model_version: {version} '
    text += " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    text += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return text + " }"


# The header of the ensembles that break Triton's decoupled rules: N streams through
# "repeat" (decoupled); A and B are the ensemble's outputs.
_DECOUPLED_HEADER = """platform: "ensemble"
max_batch_size: 0
input [ { name: "N" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "A" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "B" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
_REPEAT_TO_A = _step("repeat", inputs={"N": "N"}, outputs={"OUT": "A"})

# Ensembles that must not load, and Triton 2.51's reason for each (checked against it);
# a third element is the config's header where it is not _ENSEMBLE_HEADER.
BAD_ENSEMBLES = {
    "e_unknown": (
        [_step(model="nope")],
        "ensemble e_unknown contains models that are not available or ambiguous: nope",
    ),
    "e_version": (
        [_step(version=3)],
        "ensemble 'e_version' depends on 'add_sub' whose required version 3 is not loaded.",
    ),
    "e_double": (
        [_step(), _step()],
        "ensemble tensor 'OUTPUT0' can appear in an output map only once for ensemble "
        "'e_double' step 1",
    ),
    "e_unused": (
        [_step(inputs={"INPUT0": "INPUT0", "INPUT1": "INPUT0"})],
        "ensemble input 'INPUT1' for ensemble e_unused' is not used",
    ),
    "e_unwritten": (
        [_step(outputs={"OUTPUT1": "other"})],
        "ensemble output 'OUTPUT0' for ensemble e_unwritten' is not used",
    ),
    "e_cycle": (
        [
            _step(inputs={"INPUT0": "INPUT0", "INPUT1": "b"}, outputs={"OUTPUT0": "a"}),
            _step(
                inputs={"INPUT0": "a", "INPUT1": "INPUT1"},
                outputs={"OUTPUT0": "b", "OUTPUT1": "OUTPUT0"},
            ),
        ],
        "output 'OUTPUT0' for ensemble 'e_cycle' is not written: at least one of its "
        "depending tensors, 'b', is not connected",
    ),
    "e_badinput": (
        [_step(inputs={"INPUT0": "INPUT0", "NOPE": "INPUT1"})],
        "in ensemble e_badinput, ensemble tensor INPUT1 is mapping to non-existing input NOPE "
        "in model add_sub",
    ),
    "e_dtype": (
        [_step()],
        "in ensemble e_dtype, ensemble tensor INPUT0: inconsistent data type: TYPE_INT32 is "
        "inferred from model e_dtype while TYPE_FP32 is inferred from model add_sub",
    ),
    "e_shape": (
        [_step()],
        "in ensemble e_shape, ensemble tensor INPUT0: inconsistent shape: [-1,8] is inferred "
        "from model e_shape while [-1,16] is inferred from model add_sub",
    ),
    # A streamed output beside one computed once from the request: Triton refuses
    # outputs (or a step's inputs) that come from different decoupled models.
    "e_decoupled_mixed": (
        [_REPEAT_TO_A, _step("int_double", inputs={"X": "N"}, outputs={"Y": "B"})],
        "in ensemble e_decoupled_mixed, step of model 'e_decoupled_mixed' receives inputs "
        "originated from different decoupled models",
        _DECOUPLED_HEADER,
    ),
    "e_decoupled_two": (
        [_REPEAT_TO_A, _step("repeat", inputs={"N": "N"}, outputs={"OUT": "B"})],
        "in ensemble e_decoupled_two, step of model 'e_decoupled_two' receives inputs "
        "originated from different decoupled models",
        _DECOUPLED_HEADER,
    ),
}


def build_repository(dest: Path, bad: bool = True) -> Path:
    shutil.copytree(EXAMPLE_MODELS / "add_sub", dest / "add_sub")
    for name in ("bls", "ensemble_add_sub", "ensemble_bls", "slow_add_sub", *MORE_MODELS):
        shutil.copytree(PIPELINE_MODELS / name, dest / name)
    shutil.copytree(DECOUPLED_MODELS / "repeat", dest / "repeat")
    # seq_echo with a TYPE_STRING correlation id control.
    (dest / "seq_echo_string" / "1").mkdir(parents=True)
    shutil.copy(dest / "seq_echo" / "1" / "model.py", dest / "seq_echo_string" / "1")
    config = (dest / "seq_echo" / "config.pbtxt").read_text()
    (dest / "seq_echo_string" / "config.pbtxt").write_text(
        config.replace('"seq_echo"', '"seq_echo_string"').replace("TYPE_UINT64", "TYPE_STRING")
    )
    if not bad:
        return dest
    # Triton marks an ensemble decoupled exactly when a step is, whatever its config
    # says: ens_decoupled without the policy, ensemble_add_sub with it.
    config = (dest / "ens_decoupled" / "config.pbtxt").read_text()
    _write_ensemble(
        dest,
        "ens_decoupled_unmarked",
        config.replace('"ens_decoupled"', '"ens_decoupled_unmarked"').replace(
            "model_transaction_policy { decoupled: true }", ""
        ),
    )
    config = (dest / "ensemble_add_sub" / "config.pbtxt").read_text()
    _write_ensemble(
        dest,
        "ens_add_sub_marked",
        config.replace('"ensemble_add_sub"', '"ens_add_sub_marked"')
        + "model_transaction_policy { decoupled: true }\n",
    )
    for name, (steps, _reason, *header) in BAD_ENSEMBLES.items():
        header = header[0] if header else _ENSEMBLE_HEADER
        if name == "e_dtype":
            header = header.replace("TYPE_FP32 dims: [ 16 ] },", "TYPE_INT32 dims: [ 16 ] },", 1)
        if name == "e_shape":
            header = header.replace("dims: [ 16 ] },", "dims: [ 8 ] },", 1)
        _write_ensemble(
            dest,
            name,
            f'name: "{name}"\n{header}ensemble_scheduling {{ step [ {", ".join(steps)} ] }}\n',
        )
    return dest


def _write_ensemble(dest: Path, name: str, config: str) -> None:
    (dest / name / "1").mkdir(parents=True)
    (dest / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = build_repository(tmp_path_factory.mktemp("pipelines-repository"))
    server = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("pipelines"),
        name="pipelines",
        extra_args=["--exit-on-error=false", "--strict-readiness=false"],
    )
    server.start(wait="ready", timeout=120)
    yield server
    server.stop()


def infer(server, model: str, parameters: dict | None = None, a=A, b=B):
    body = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": list(a.shape),
                "datatype": "FP32",
                "data": a.ravel().tolist(),
            },
            {
                "name": "INPUT1",
                "shape": list(b.shape),
                "datatype": "FP32",
                "data": b.ravel().tolist(),
            },
        ]
    }
    if parameters:
        body["parameters"] = parameters
    response = requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    payload = response.json()
    outputs = {
        o["name"]: np.array(o["data"], dtype=np.float32).reshape(o["shape"])
        for o in payload.get("outputs", [])
    }
    return response.status_code, payload, outputs


def arena_blocks(server) -> int:
    return requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()["blocks_in_use"]


def test_ensemble_runs_its_steps_in_order(server):
    status, _payload, outputs = infer(server, "ensemble_add_sub")
    assert status == 200
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * A)
    np.testing.assert_array_equal(outputs["OUTPUT1"], 2 * B)


@pytest.mark.parametrize("mode", ["sync", "ensemble"])
def test_ensemble_with_a_bls_step(server, mode):
    # The step's model calls add_sub (or the other ensemble) itself; the ensemble
    # request's parameters reach the step.
    status, payload, outputs = infer(server, "ensemble_bls", {"mode": mode})
    assert status == 200, payload
    expected = (2 * A, 2 * B) if mode == "ensemble" else (A + B, A - B)
    np.testing.assert_array_equal(outputs["SUM"], expected[0])
    np.testing.assert_array_equal(outputs["DIFFERENCE"], expected[1])


def test_ensemble_step_error_is_the_requests_error(server):
    status, payload, _ = infer(server, "ensemble_bls", {"mode": "fail"})
    assert (status, payload) == (
        400,
        {"error": "in ensemble 'ensemble_bls', bls failed on purpose"},
    )


def test_ensemble_requested_output_only(server):
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(A, binary_data=True)
    inputs[1].set_data_from_numpy(B, binary_data=True)
    result = client.infer(
        "ensemble_add_sub", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * B)
    assert result.as_numpy("OUTPUT0") is None


def test_ensemble_metadata_and_config(server):
    metadata = requests.get(f"{server.url}/v2/models/ensemble_add_sub", timeout=TIMEOUT).json()
    assert metadata["platform"] == "ensemble"
    config = requests.get(f"{server.url}/v2/models/ensemble_add_sub/config", timeout=TIMEOUT).json()
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == ["add_sub"] * 2
    assert "instance_group" not in config or not config["instance_group"]


@pytest.mark.parametrize("mode", ["sync", "async", "decoupled", "self", "nested"])
def test_bls_calls_add_sub(server, mode):
    status, payload, outputs = infer(server, "bls", {"mode": mode})
    assert status == 200, payload
    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
    np.testing.assert_array_equal(outputs["OUTPUT1"], A - B)


def test_bls_calls_an_ensemble(server):
    status, payload, outputs = infer(server, "bls", {"mode": "ensemble"})
    assert status == 200, payload
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * A)
    np.testing.assert_array_equal(outputs["OUTPUT1"], 2 * B)


@pytest.mark.parametrize(
    "parameters,message",
    [
        (
            {"mode": "target", "target": "nope"},
            "Model nope - Error when running inference: Failed for execute the inference "
            "request. Model 'nope' is not ready.",
        ),
        (
            {"mode": "target", "target": "add_sub", "version": 7},
            "Model add_sub - Error when running inference: Failed for execute the inference "
            "request. Model 'add_sub' is not ready.",
        ),
        (
            {"mode": "bad_input"},
            "Model add_sub - Error when running inference: [request id: <id_unknown>] expected "
            "2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], but missing "
            "required input(s) ['INPUT1']. Please provide all required input(s).",
        ),
    ],
)
def test_bls_errors_come_back_as_triton_words_them(server, parameters, message):
    # The model returns response.error() as its own error (status from its code: INTERNAL).
    status, payload, _ = infer(server, "bls", parameters)
    assert (status, payload) == (500, {"error": message})


def test_bls_error_of_the_called_model_keeps_its_code(server):
    status, payload, _ = infer(server, "bls", {"mode": "call_fail"})
    assert (status, payload) == (400, {"error": "bls failed on purpose"})


def test_bls_version_selection(server):
    status, payload, outputs = infer(
        server, "bls", {"mode": "target", "target": "add_sub", "version": 1}
    )
    assert status == 200, payload
    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)


def _failures(server, model: str) -> tuple[int, float]:
    """(the statistics' failure count, nv_inference_request_failure{reason="REJECTED"})."""
    stats = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    text = requests.get(f"http://{server.host}:{server.metrics_port}/metrics", timeout=TIMEOUT).text
    series = f'nv_inference_request_failure{{model="{model}",reason="REJECTED",version="1"}}'
    return stats["model_stats"][0]["inference_stats"]["fail"]["count"], metric_value(text, series)


def test_bls_timeout_in_the_called_models_queue(server):
    # slow_add_sub's one instance is held busy; the BLS request may wait 1 ms.
    before = _failures(server, "slow_add_sub")
    folder = Path(server.repository) / "slow_add_sub"
    (folder / "executing").unlink(missing_ok=True)
    (folder / "hold").touch()
    busy = threading.Thread(target=infer, args=(server, "slow_add_sub"))
    busy.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (folder / "executing").exists():
            assert time.monotonic() < deadline, "slow_add_sub never started executing"
            time.sleep(0.005)
        status, payload, _ = infer(
            server, "bls", {"mode": "timeout", "target": "slow_add_sub", "timeout": 1000}
        )
        assert (status, payload) == (503, {"error": "Request timeout expired"})
        assert busy.is_alive()  # refused at its deadline, not once the instance was free
    finally:
        (folder / "hold").unlink()
        busy.join()
    # The called model counts it as it counts a client's request that timed out there.
    deadline = time.monotonic() + 5
    while _failures(server, "slow_add_sub") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    fails, rejected = _failures(server, "slow_add_sub")
    assert (fails - before[0], rejected - before[1]) == (1, 1.0)


def test_concurrent_bls_and_ensemble_traffic_leaves_the_arena_as_it_was(server):
    infer(server, "bls")  # every worker warm
    before = arena_blocks(server)
    modes = ["sync", "async", "self", "nested", "ensemble", "decoupled"] * 6
    failing = [("bls", {"mode": "target", "target": "nope"}), ("ensemble_bls", {"mode": "fail"})]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda m: infer(server, "bls", {"mode": m}), modes))
        results += list(pool.map(lambda _: infer(server, "ensemble_add_sub"), range(24)))
        errors = list(pool.map(lambda call: infer(server, *call), failing * 6))
    assert all(status == 200 for status, _p, _o in results), [p for s, p, _o in results if s != 200]
    assert all(status in (400, 500) for status, _p, _o in errors)
    deadline = time.monotonic() + 5
    while arena_blocks(server) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert arena_blocks(server) == before


@pytest.mark.parametrize("name", sorted(BAD_ENSEMBLES))
def test_bad_ensembles_are_unavailable_with_tritons_reason(server, name):
    index = requests.post(f"{server.url}/v2/repository/index", timeout=TIMEOUT).json()
    entry = next(e for e in index if e["name"] == name)
    assert entry["state"] == "UNAVAILABLE"
    assert entry["reason"] == BAD_ENSEMBLES[name][1]
    assert requests.get(f"{server.url}/v2/models/{name}/ready", timeout=TIMEOUT).status_code == 400


def test_unloading_a_composing_model_makes_the_ensemble_unready(tmp_path):
    repository = build_repository(tmp_path / "repository", bad=False)
    with NaiadServer(
        repository,
        log_dir=tmp_path,
        name="pipelines-explicit",
        extra_args=["--model-control-mode=explicit", "--load-model=*"],
    ) as server:
        ready = f"{server.url}/v2/models/ensemble_add_sub/ready"
        assert requests.get(ready, timeout=TIMEOUT).status_code == 200
        assert infer(server, "bls")[0] == 200  # bls knows add_sub's handle from now on
        unload = requests.post(f"{server.url}/v2/repository/models/add_sub/unload", timeout=TIMEOUT)
        assert unload.status_code == 200
        assert requests.get(ready, timeout=TIMEOUT).status_code == 400
        status, _payload, _ = infer(server, "ensemble_add_sub")
        assert status != 200
        load = requests.post(f"{server.url}/v2/repository/models/add_sub/load", timeout=TIMEOUT)
        assert load.status_code == 200
        assert requests.get(ready, timeout=TIMEOUT).status_code == 200
        # The reloaded add_sub has a new core handle: workers that knew the old one
        # (the ensemble's, bls's) find the new one.
        assert infer(server, "ensemble_add_sub")[0] == 200
        assert infer(server, "bls")[0] == 200


def _success_count(server, model: str) -> int:
    stats = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    return stats["model_stats"][0]["inference_stats"]["success"]["count"]


def test_statistics_count_each_step_and_bls_call_on_the_called_model(server):
    # As Triton: add_sub's statistics count the requests an ensemble's steps and BLS
    # calls send it; the ensemble and the BLS model count their own requests.
    before = {m: _success_count(server, m) for m in ("add_sub", "ensemble_add_sub", "bls")}
    for _ in range(3):
        assert infer(server, "ensemble_add_sub")[0] == 200
        assert infer(server, "bls")[0] == 200
    after = {m: _success_count(server, m) for m in before}
    assert after["add_sub"] - before["add_sub"] == 3 * 2 + 3
    assert after["ensemble_add_sub"] - before["ensemble_add_sub"] == 3
    assert after["bls"] - before["bls"] == 3
    stats = requests.get(f"{server.url}/v2/models/add_sub/stats", timeout=TIMEOUT).json()
    entry = stats["model_stats"][0]
    assert entry["execution_count"] >= 1
    assert (
        entry["inference_stats"]["compute_infer"]["count"]
        == entry["inference_stats"]["success"]["count"]
    )


def _ensemble_stats(server) -> dict:
    stats = requests.get(f"{server.url}/v2/models/ensemble_add_sub/stats", timeout=TIMEOUT)
    entry = stats.json()["model_stats"][0]
    counts = {k: v["count"] for k, v in entry["inference_stats"].items()}
    counts["inferences"] = entry["inference_count"]
    counts["executions"] = entry["execution_count"]
    counts["batch 1"] = sum(
        b["compute_infer"]["count"] for b in entry["batch_stats"] if b["batch_size"] == 1
    )
    return counts


def test_concurrent_ensemble_requests_get_their_own_outputs_and_each_counts_once(server):
    # Requests that end together are answered from one response block (the core
    # gathers them): each client still gets its own outputs, and the ensemble's
    # statistics count each request as one execution of batch size 1, as Triton does.
    def binary(k: int):  # the fast lane's binary tensors; a client per thread (gevent)
        a = np.full((1, 16), float(k), dtype=np.float32)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a, binary_data=True)
        inputs[1].set_data_from_numpy(B, binary_data=True)
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        try:
            result = client.infer("ensemble_add_sub", inputs)
        finally:
            client.close()
        return k, result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")

    def json_body(k: int):
        a = np.full((1, 16), float(k), dtype=np.float32)
        status, _payload, outputs = infer(server, "ensemble_add_sub", a=a)
        assert status == 200
        return k, outputs["OUTPUT0"], outputs["OUTPUT1"]

    before = _ensemble_stats(server)
    calls = [binary] * 40 + [json_body] * 24
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: calls[i](i), range(len(calls))))
    for k, out0, out1 in answers:  # (a + b) + (a - b), (a + b) - (a - b)
        np.testing.assert_array_equal(out0, np.full((1, 16), 2.0 * k, dtype=np.float32))
        np.testing.assert_array_equal(out1, 2 * B)
    after = _ensemble_stats(server)
    counted = {k: after[k] - before[k] for k in after}
    n = len(calls)
    for key in ("success", "queue", "compute_infer", "inferences", "executions", "batch 1"):
        assert counted[key] == n, (key, counted)
    assert counted["fail"] == 0


def test_metrics_follow_the_statistics_of_steps_and_bls_calls(server):
    assert infer(server, "ensemble_add_sub")[0] == 200
    text = requests.get(f"http://{server.host}:{server.metrics_port}/metrics", timeout=TIMEOUT).text
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("nv_inference_request_success{") and 'model="add_sub"' in line
    )
    assert float(line.rsplit(" ", 1)[1]) == _success_count(server, "add_sub")


def test_ensemble_reads_inputs_from_and_writes_outputs_to_client_shm(server):
    # The core's ensemble scheduler reads the request block itself: inputs the lane left
    # in the client's region (read in place by a worker that runs them alone) must come
    # into the block first, or the steps compute on the rows' stale bytes.
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    size = A.nbytes
    with Region("ens_in", 2 * size) as inputs, Region("ens_out", 2 * size) as outputs:
        inputs.write([A, B])
        client.register_system_shared_memory(inputs.name, inputs.key, 2 * size)
        client.register_system_shared_memory(outputs.name, outputs.key, 2 * size)
        try:
            for _ in range(3):  # alone each time: the in-place case
                infer_inputs = [
                    httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                    httpclient.InferInput("INPUT1", [1, 16], "FP32"),
                ]
                infer_inputs[0].set_shared_memory(inputs.name, size, offset=0)
                infer_inputs[1].set_shared_memory(inputs.name, size, offset=size)
                wanted = [
                    httpclient.InferRequestedOutput("OUTPUT0"),
                    httpclient.InferRequestedOutput("OUTPUT1"),
                ]
                wanted[0].set_shared_memory(outputs.name, size, offset=0)
                wanted[1].set_shared_memory(outputs.name, size, offset=size)
                client.infer("ensemble_add_sub", infer_inputs, outputs=wanted)
                np.testing.assert_array_equal(outputs.read(np.float32, [1, 16]), 2 * A)
                np.testing.assert_array_equal(outputs.read(np.float32, [1, 16], size), 2 * B)
                outputs.write_bytes(bytes(2 * size))
        finally:
            client.unregister_system_shared_memory()
            client.close()


def test_ensemble_output_region_too_small_is_tritons_500(server):
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    size = A.nbytes
    with Region("ens_small", size // 2) as small:
        client.register_system_shared_memory(small.name, small.key, size // 2)
        try:
            wanted = httpclient.InferRequestedOutput("OUTPUT0")
            wanted.set_shared_memory(small.name, size // 2)
            infer_inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "FP32"),
                httpclient.InferInput("INPUT1", [1, 16], "FP32"),
            ]
            infer_inputs[0].set_data_from_numpy(A)
            infer_inputs[1].set_data_from_numpy(B)
            with pytest.raises(InferenceServerException) as info:
                client.infer("ensemble_add_sub", infer_inputs, outputs=[wanted])
            assert info.value.status() == "500"
            assert info.value.message() == (
                f"shared memory size specified with the request for output 'OUTPUT0' "
                f"({size // 2} bytes) should be at least {size} bytes to hold the results"
            )
        finally:
            client.unregister_system_shared_memory()
            client.close()


@pytest.fixture(scope="module")
def general_path_server(tmp_path_factory):
    """The same repository served without the fast lanes: the Python general path
    answers every request."""
    root = tmp_path_factory.mktemp("pipelines-general")
    server = NaiadServer(
        build_repository(root / "repository"),
        log_dir=root,
        name="pipelines-general",
        extra_args=["--exit-on-error=false", "--strict-readiness=false", "--fast-lane=false"],
    ).start(wait="ready", timeout=120)
    yield server
    server.stop()


def test_ensemble_shm_outputs_on_the_general_path(general_path_server):
    # The same two cases where the Python general path answers (shm.write_returned_outputs).
    test_ensemble_reads_inputs_from_and_writes_outputs_to_client_shm(general_path_server)
    test_ensemble_output_region_too_small_is_tritons_500(general_path_server)


# -- The sequence parameters of ensemble responses ---------------------------------------


def sequence_parameters(sequence_id, start: bool = False, end: bool = False) -> dict:
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


# (ensemble, request parameters, the response's parameters), as Triton 2.51 answers:
# every response of an ensemble says the sequence of its outputs, also without one.
ENSEMBLE_SEQUENCES = [
    ("ensemble_add_sub", None, sequence_parameters(0)),
    ("ensemble_add_sub", {"sequence_id": 9, "sequence_start": True}, sequence_parameters(9, True)),
    (
        "ensemble_add_sub",
        {"sequence_id": "abc", "sequence_end": True},
        sequence_parameters("abc", end=True),
    ),
    # A uint64 above int64's range, as Triton's int64 parameter gives it back.
    ("ensemble_add_sub", {"sequence_id": 2**63 + 5}, sequence_parameters(5 - 2**63)),
    ("ens_nested", {"sequence_id": 8}, sequence_parameters(8)),
]


@pytest.mark.parametrize("path", ["lane", "general"])
def test_ensemble_responses_say_their_sequence(server, general_path_server, path):
    target = server if path == "lane" else general_path_server
    lanes = f"{target.url}/v2/naiad/lanes"
    before = requests.get(lanes, timeout=TIMEOUT).json()["lane_requests"]
    for model, parameters, expected in ENSEMBLE_SEQUENCES:
        status, payload, _ = infer(target, model, parameters)
        assert status == 200, payload
        assert payload["parameters"] == expected, (model, parameters)
    # Binary tensors (tritonclient), the same parameters.
    with httpclient.InferenceServerClient(f"{target.host}:{target.http_port}") as client:
        inputs = []
        for name, value in (("INPUT0", A), ("INPUT1", B)):
            tensor = httpclient.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(value, binary_data=True)
            inputs.append(tensor)
        result = client.infer("ensemble_add_sub", inputs, sequence_id=4, sequence_start=True)
        assert result.get_response()["parameters"] == sequence_parameters(4, True)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * A)
        # A plain model says nothing of its sequence.
        assert "parameters" not in client.infer("add_sub", inputs, sequence_id=4).get_response()
    after = requests.get(lanes, timeout=TIMEOUT).json()["lane_requests"]
    assert (after > before) == (path == "lane")


def _override(server, respond_with: dict, **sequence) -> tuple:
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [3]}],
        "parameters": {"respond_with": json.dumps(respond_with), **sequence},
    }
    r = requests.post(f"{server.url}/v2/models/ens_override/infer", json=body, timeout=TIMEOUT)
    payload = r.json()
    outputs = {o["name"]: o["data"] for o in payload.get("outputs", [])}
    return r.status_code, payload.get("parameters", payload.get("error")), outputs


def test_a_steps_response_parameters_name_the_sequence_of_the_steps_after_it(server):
    # sequence_override's response names sequence 21 from its start: seq_echo, the next
    # step, runs in that sequence (its CORRID and START), and the ensemble says so.
    status, parameters, outputs = _override(
        server, {"sequence_id": 21, "sequence_start": True}, sequence_id=5, sequence_start=True
    )
    assert status == 200, parameters
    assert parameters == sequence_parameters(21, True)
    assert outputs == {"OUT": [3], "CTRL": [1, 0], "CORRID_OUT": ["21"]}
    # Only END named: the request's id, the flags the response's alone (START cleared).
    status, parameters, outputs = _override(
        server, {"sequence_end": True}, sequence_id=21, sequence_start=True
    )
    assert (status, parameters) == (200, sequence_parameters(21, end=True))
    assert outputs["CTRL"] == [0, 1]
    # No sequence parameters in the response: the request's own pass on.
    status, parameters, outputs = _override(
        server, {"other": "x"}, sequence_id=22, sequence_start=True, sequence_end=True
    )
    assert (status, parameters) == (200, sequence_parameters(22, True, True))
    assert outputs["CORRID_OUT"] == ["22"]


@pytest.mark.parametrize(
    "respond_with, message",
    [
        (
            {"sequence_start": 1},
            "expect parameter 'sequence_start' to be TRITONSERVER_PARAMETER_BOOL",
        ),
        (
            {"sequence_end": "yes"},
            "expect parameter 'sequence_end' to be TRITONSERVER_PARAMETER_BOOL",
        ),
        (
            {"sequence_id": True},
            "expected parameter 'sequence_id' to be TRITONSERVER_PARAMETER_INT or "
            "TRITONSERVER_PARAMETER_STRING",
        ),
    ],
)
def test_a_step_naming_its_sequence_with_the_wrong_type_fails_as_triton(
    server, respond_with, message
):
    before = arena_blocks(server)
    status, error, _ = _override(server, respond_with, sequence_id=23, sequence_start=True)
    assert (status, error) == (400, f"in ensemble 'ens_override', {message}")
    assert arena_blocks(server) == before


# -- BLS calls to sequence models ---------------------------------------------------------

_NO_ID = "inference request to model '{}' must specify a non-zero or non-empty correlation ID"
_NOT_STARTED = (
    "inference request for sequence {} to model '{}' must specify the START flag on the first "
    "request of the sequence"
)
_BLS_PREFIX = "Model seq_echo - Error when running inference: "


def _echo(total: int, start: int, end: int, corrid) -> tuple:
    return 200, {"TOTAL": [total], "CTRL": [start, end], "CORRID_OUT": [str(corrid)]}


# (INPUT, bls_sequence's parameters, its answer): sent in order; Triton 2.51 answers the
# same (tests/test_pipelines_triton.py). Two sequences interleave; the last ones go
# through the ensemble ens_seq_echo, whose step seq_echo joins the call's sequence.
BLS_SEQUENCE_STEPS = [
    (1, {}, (500, _BLS_PREFIX + _NO_ID.format("seq_echo"))),
    (1, {"corrid": 5}, (500, _BLS_PREFIX + _NOT_STARTED.format(5, "seq_echo"))),
    (1, {"corrid": 5, "start": True}, _echo(1, 1, 0, 5)),
    (2, {"corrid": 5}, _echo(3, 0, 0, 5)),
    (10, {"corrid": 6, "start": True}, _echo(10, 1, 0, 6)),
    (3, {"corrid": 5, "end": True}, _echo(6, 0, 1, 5)),
    (4, {"corrid": 5}, (500, _BLS_PREFIX + _NOT_STARTED.format(5, "seq_echo"))),
    (4, {"corrid": 6, "end": True}, _echo(14, 0, 1, 6)),
    (1, {"target": "ens_seq_echo", "corrid": 9, "start": True}, _echo(1, 1, 0, 9)),
    (2, {"target": "ens_seq_echo", "corrid": 9, "end": True}, _echo(3, 0, 1, 9)),
    (
        2,
        {"target": "ens_seq_echo"},
        (500, "in ensemble 'ens_seq_echo', " + _NO_ID.format("seq_echo")),
    ),
    (
        2,
        {"target": "ens_seq_echo", "corrid": 9},
        (500, "in ensemble 'ens_seq_echo', " + _NOT_STARTED.format(9, "seq_echo")),
    ),
]


def bls_sequence(server, value: int, parameters: dict) -> tuple:
    """bls_sequence's answer: (200, {output: data}) or (status, error message)."""
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
        "parameters": parameters,
    }
    response = requests.post(
        f"{server.url}/v2/models/bls_sequence/infer", json=body, timeout=TIMEOUT
    )
    payload = response.json()
    if response.status_code != 200:
        return response.status_code, payload.get("error")
    return 200, {o["name"]: o["data"] for o in payload["outputs"]}


def test_bls_calls_drive_a_sequence_model_and_an_ensembles_sequence_step(server):
    for value, parameters, expected in BLS_SEQUENCE_STEPS:
        assert bls_sequence(server, value, parameters) == expected, (value, parameters)


def test_bls_calls_carry_a_string_correlation_id(server):
    # Not compared with Triton: its 2.51 fails every request of a TYPE_STRING CORRID model.
    target = {"target": "seq_echo_string"}
    steps = [
        (1, {"corrid": "abc", "start": True}, _echo(1, 1, 0, "abc")),
        (2, {"corrid": "abc"}, _echo(3, 0, 0, "abc")),
        (5, {"corrid": "abd", "start": True}, _echo(5, 1, 0, "abd")),
        (3, {"corrid": "abc", "end": True}, _echo(6, 0, 1, "abc")),
        (
            1,
            {"corrid": "abc"},
            (
                500,
                "Model seq_echo_string - Error when running inference: "
                + _NOT_STARTED.format("abc", "seq_echo_string"),
            ),
        ),
        (1, {"corrid": "abd", "end": True}, _echo(6, 0, 1, "abd")),
    ]
    for value, parameters, expected in steps:
        assert bls_sequence(server, value, {**target, **parameters}) == expected, parameters


# -- ResponseIterator.cancel() ------------------------------------------------------------


def _bls_cancel(server, n: int, asynchronous: bool = False) -> tuple[int, str]:
    """bls_cancel's (RECEIVED, ERROR): it cancels its stream from repeat after n responses."""
    body = {"inputs": [{"name": "N", "shape": [1], "datatype": "INT32", "data": [n]}]}
    if asynchronous:
        body["parameters"] = {"async": True}
    response = requests.post(f"{server.url}/v2/models/bls_cancel/infer", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o["data"][0] for o in response.json()["outputs"]}
    return outputs["RECEIVED"], outputs["ERROR"]


def _repeat(server, mode: str, n: int = 0) -> dict:
    response = requests.post(
        f"{server.url}/v2/models/repeat/generate", json={"N": [n], "mode": mode}, timeout=TIMEOUT
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["exec", "async_exec"])
def test_cancelling_a_bls_stream_reaches_the_called_models_is_cancelled(server, asynchronous):
    cancelled = _repeat(server, "cancelled")["OUT"]
    start = time.monotonic()
    received, error = _bls_cancel(server, 3, asynchronous)
    # repeat (until_cancelled) streams every 10 ms for 10 s unless its request is
    # cancelled; cancelled, it sends the final flag alone.
    assert time.monotonic() - start < 5
    assert 3 <= received < 100 and error == ""
    assert _repeat(server, "cancelled")["OUT"] == cancelled + 1


def test_cancelling_a_queued_bls_stream_drops_it(server):
    executed = _repeat(server, "executed")["OUT"]  # requests repeat's execute saw
    # repeat's one instance sleeps 1.5 s in execute: the BLS request waits in its queue.
    busy = threading.Thread(target=_repeat, args=(server, "block", 1500))
    busy.start()
    time.sleep(0.3)
    try:
        received, error = _bls_cancel(server, 0)
        assert (received, error) == (0, "Request was cancelled")
    finally:
        busy.join()
    # The cancelled request never ran: repeat saw the busy request and this one since.
    assert _repeat(server, "executed")["OUT"] == executed + 2


# -- failed BLS calls in the called model's statistics -------------------------------------


def model_counts(server, model: str) -> tuple[int, int, int]:
    """(successes, failures, executions) of a model's statistics."""
    stats = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    entry = stats["model_stats"][0]
    inference = entry["inference_stats"]
    return inference["success"]["count"], inference["fail"]["count"], entry["execution_count"]


def test_a_bls_call_the_called_model_fails_is_its_failure(server):
    # As Triton 2.51: int_double's execute raised for the call: one failure, one execution.
    before = model_counts(server, "int_double")
    status, payload, _ = infer(server, "bls", {"mode": "raise_target"})
    assert status == 500 and "int_double takes no negative X" in payload["error"], payload
    successes, failures, executions = before
    assert model_counts(server, "int_double") == (successes, failures + 1, executions + 1)


def test_an_error_response_the_model_sends_is_its_success(server):
    # Triton 2.51's Python backend counts a request its model answered with
    # InferenceResponse(error=...) as a success (queue and compute counted, no failure),
    # for a client's request and for an ensemble's step alike; the ensemble whose step
    # failed fails. An execute() that raises is a failure (the test above).
    before = {m: model_counts(server, m) for m in ("bls", "ensemble_bls")}
    status, payload, _ = infer(server, "bls", {"mode": "fail"})
    assert status == 400 and payload["error"] == "bls failed on purpose", payload
    assert infer(server, "ensemble_bls", {"mode": "fail"})[0] == 400
    after = {m: model_counts(server, m) for m in before}
    changes = {m: tuple(a - b for a, b in zip(after[m], before[m])) for m in before}
    assert changes == {"bls": (2, 0, 2), "ensemble_bls": (0, 1, 0)}


def test_a_bls_call_refused_before_the_called_model_is_not_its_failure(server):
    # As Triton 2.51: a call with a bad shape never reaches add_sub's statistics.
    before = model_counts(server, "add_sub")
    status, payload, _ = infer(server, "bls", {"mode": "bad_shape"})
    assert status == 500
    assert payload["error"].startswith(
        "Model add_sub - Error when running inference: [request id: <id_unknown>] unexpected "
        "shape for input 'INPUT1' for model 'add_sub'. Expected [-1,16], got [1,8]."
    )
    assert model_counts(server, "add_sub") == before


# -- ensembles of ensembles, an ensemble with a decoupled step -----------------------------


@pytest.mark.parametrize("model", ["ens_nested", "ens_nested_deep"])
def test_an_ensemble_of_ensembles(server, model):
    names = ("add_sub", "ensemble_add_sub", "ens_nested", model)
    before = {name: _success_count(server, name) for name in names}
    status, payload, outputs = infer(server, model)
    assert status == 200, payload
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * A + 2 * B)
    np.testing.assert_array_equal(outputs["OUTPUT1"], 2 * A - 2 * B)
    after = {name: _success_count(server, name) for name in names}
    # Each level counts the request once (as Triton does); add_sub ran three steps.
    assert after["add_sub"] - before["add_sub"] == 3
    assert after["ensemble_add_sub"] - before["ensemble_add_sub"] == 1
    assert after["ens_nested"] - before["ens_nested"] == 1
    assert after[model] - before[model] == 1


def test_an_ensemble_of_ensembles_fails_with_its_inner_steps_error(server):
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}]}
    response = requests.post(f"{server.url}/v2/models/ens_nested/infer", json=body, timeout=TIMEOUT)
    assert response.status_code == 400
    assert "expected 2 inputs but got 1 inputs for model 'ens_nested'" in response.json()["error"]


@pytest.mark.parametrize("model", ["ens_decoupled", "ens_decoupled_unmarked"])
def test_an_ensemble_with_a_decoupled_step_over_http(server, model):
    # Triton 2.51's answer: /infer refuses a decoupled ensemble, also one whose config
    # does not say it is (a step is). Its generate_stream streams an event per response
    # of the decoupled step run through int_double.
    config = requests.get(f"{server.url}/v2/models/{model}/config", timeout=TIMEOUT).json()
    assert config["model_transaction_policy"] == {"decoupled": True}
    n = [{"name": "N", "shape": [1], "datatype": "INT32", "data": [3]}]
    response = requests.post(
        f"{server.url}/v2/models/{model}/infer", json={"inputs": n}, timeout=TIMEOUT
    )
    assert (response.status_code, response.json()) == (
        501,
        {"error": "HTTP end point doesn't support models with decoupled transaction policy"},
    )
    url = f"{server.url}/v2/models/{model}/generate_stream"
    response = requests.post(url, json={"N": [3]}, timeout=TIMEOUT)
    assert response.status_code == 200
    events = [json.loads(e.removeprefix("data: ")) for e in response.text.split("\n\n") if e]
    assert [event["Y"] for event in events] == [0, 2, 4]
    # Each event says its sequence (none asked: 0), a key of its own as Triton writes it.
    for event in events:
        assert {key: event[key] for key in sequence_parameters(0)} == sequence_parameters(0)


def test_an_ensemble_marked_decoupled_without_a_decoupled_step_is_not(server):
    # As Triton 2.51: its config's decoupled is cleared at load, and /infer serves it.
    url = f"{server.url}/v2/models/ens_add_sub_marked"
    config = requests.get(f"{url}/config", timeout=TIMEOUT).json()
    assert config["model_transaction_policy"] == {"decoupled": False}
    status, payload, outputs = infer(server, "ens_add_sub_marked")
    assert status == 200, payload
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * A)  # (a + b) + (a - b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], 2 * B)
