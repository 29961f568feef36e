"""The sequence batcher with framework backends, black-box over HTTP: onnxruntime and
pytorch sequence models get the control inputs and their implicit state as batch-major
tensors, and their state outputs carry to the sequence's next request
(tests/sequence_framework.py builds the models: an accumulator OUTPUT = STATE_IN +
INPUT that echoes its controls). Also the load-time checks of a sequence model's
control and state tensors, in-process, with Triton's messages.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
import sequence_framework
from naiad.repository.config import config_to_json, load_model_config
from server_harness import NaiadServer

TIMEOUT = 20
ONNX = list(sequence_framework.ONNX_MODELS)
TORCH = list(sequence_framework.TORCH_MODELS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("torch")
    repository = sequence_framework.build_repository(tmp_path_factory.mktemp("seq-framework"))
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("seqfw"), name="seqfw")
    server.start(wait="ready", timeout=180)
    yield server
    server.stop()


def _names(model: str) -> dict:
    """The accumulator's tensor names in `model` (the TorchScript ones carry __index)."""
    if model.startswith("seq_pt"):
        return {
            "INPUT": "INPUT__0",
            "OUTPUT": "OUTPUT__0",
            "CTRL": "CTRL__1",
            "CORRID_OUT": "CORRID_OUT__2",
        }
    return {name: name for name in ("INPUT", "OUTPUT", "CTRL", "CORRID_OUT")}


def infer(url, model, value, session=requests, outputs=None, **parameters):
    names = _names(model)
    batched = model != "seq_onnx_nobatch"
    body = {
        "inputs": [
            {
                "name": names["INPUT"],
                "shape": [1, 1] if batched else [1],
                "datatype": "FP32",
                "data": [value],
            }
        ],
        "parameters": parameters,
    }
    if outputs is not None:
        body["outputs"] = [{"name": name} for name in outputs]
    response = session.post(f"{url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    answer = response.json()
    if response.status_code != 200:
        return response.status_code, answer["error"]
    by_name = {o["name"]: o["data"] for o in answer["outputs"]}
    return 200, {key: by_name[name] for key, name in names.items() if name in by_name} | {
        name: data for name, data in by_name.items() if name not in names.values()
    }


@pytest.mark.parametrize("model", ONNX + TORCH)
def test_a_sequence_carries_state_and_controls(server, model):
    url = server.url
    status, first = infer(url, model, 5, sequence_id=77, sequence_start=True)
    assert status == 200, first
    assert first["OUTPUT"] == [5.0] and first["CTRL"] == [1.0, 0.0, 1.0]
    assert first["CORRID_OUT"] == [77]
    status, second = infer(url, model, 6, sequence_id=77)
    assert second["OUTPUT"] == [11.0] and second["CTRL"] == [0.0, 0.0, 1.0]
    status, last = infer(url, model, 7, sequence_id=77, sequence_end=True)
    assert last["OUTPUT"] == [18.0] and last["CTRL"] == [0.0, 1.0, 1.0]
    # The id is free again: a new sequence starts from the initial state (zeros).
    status, again = infer(url, model, 1, sequence_id=77, sequence_start=True, sequence_end=True)
    assert again["OUTPUT"] == [1.0] and again["CTRL"] == [1.0, 1.0, 1.0]


def _run_sequence(url, model, corrid, values, barrier):
    sums = []
    with requests.Session() as session:
        for step, value in enumerate(values):
            flags = {}
            if step == 0:
                flags["sequence_start"] = True
            if step == len(values) - 1:
                flags["sequence_end"] = True
            barrier.wait(timeout=TIMEOUT)
            status, out = infer(url, model, value, session, sequence_id=corrid, **flags)
            assert status == 200, out
            assert out["CORRID_OUT"] == [corrid]
            sums.append(out["OUTPUT"][0])
    return sums


def _stats(url, model):
    body = requests.get(f"{url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    return body["model_stats"][0]


@pytest.mark.parametrize("model", ["seq_onnx_direct", "seq_onnx_oldest", *TORCH])
def test_interleaved_sequences_keep_their_own_state_across_batches(server, model):
    """Four sequences at once (as many as the model has slots), each step of all of them
    together: batches mix sequences (fewer executions than requests), and each
    sequence's sums are its own."""
    url = server.url
    before = _stats(url, model)
    count, steps = 4, 4
    barrier = threading.Barrier(count)
    values = {1000 + k: [float(k + 1 + 10 * step) for step in range(steps)] for k in range(count)}
    with ThreadPoolExecutor(count) as pool:
        futures = {
            corrid: pool.submit(_run_sequence, url, model, corrid, vals, barrier)
            for corrid, vals in values.items()
        }
        got = {corrid: future.result(timeout=60) for corrid, future in futures.items()}
    for corrid, vals in values.items():
        running = [sum(vals[: i + 1]) for i in range(steps)]
        assert got[corrid] == running, corrid
    after = _stats(url, model)
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == count * steps
    assert executions < inferences, (executions, inferences)


@pytest.mark.parametrize("model", ["seq_onnx_direct", "seq_pt_direct"])
def test_direct_slot_with_a_gap_below_it_keeps_its_state(server, model):
    """Under direct, sequence B keeps slot 1 after A (slot 0) ended: B's next request
    runs at position 1 behind a not-ready filler, and its state is still its own; C,
    starting in A's freed slot, starts from zero."""
    url = server.url
    assert infer(url, model, 1, sequence_id=501, sequence_start=True)[1]["OUTPUT"] == [1.0]
    assert infer(url, model, 10, sequence_id=502, sequence_start=True)[1]["OUTPUT"] == [10.0]
    assert infer(url, model, 2, sequence_id=501, sequence_end=True)[1]["OUTPUT"] == [3.0]
    assert infer(url, model, 20, sequence_id=502)[1]["OUTPUT"] == [30.0]
    assert infer(url, model, 4, sequence_id=503, sequence_start=True)[1]["OUTPUT"] == [4.0]
    assert infer(url, model, 30, sequence_id=502, sequence_end=True)[1]["OUTPUT"] == [60.0]
    assert infer(url, model, 5, sequence_id=503, sequence_end=True)[1]["OUTPUT"] == [9.0]


def test_a_state_output_listed_among_the_outputs_reaches_the_client(server):
    url = server.url
    model = "seq_onnx_oldest"  # lists STATE_OUT among its outputs
    status, first = infer(url, model, 2, sequence_id=61, sequence_start=True)
    assert first["STATE_OUT"] == [2.0] and first["OUTPUT"] == [2.0]
    status, second = infer(url, model, 3, outputs=["OUTPUT"], sequence_id=61)
    assert status == 200 and second == {"OUTPUT": [5.0]}  # not asked for: not sent, still kept
    status, last = infer(url, model, 4, outputs=["STATE_OUT"], sequence_id=61, sequence_end=True)
    assert last == {"STATE_OUT": [9.0]}
    # A model that does not list it: the state stays the server's.
    status, error = infer(
        url, "seq_onnx_direct", 1, outputs=["STATE_OUT"], sequence_id=62, sequence_start=True
    )
    assert (status, error) == (
        400,
        "unexpected inference output 'STATE_OUT' for model 'seq_onnx_direct'",
    )
    status, first = infer(url, "seq_onnx_direct", 1, sequence_id=63, sequence_start=True)
    assert "STATE_OUT" not in first


@pytest.mark.parametrize("model", ["seq_onnx_direct", "seq_pt_direct"])
def test_refusals_are_tritons(server, model):
    url = server.url
    assert infer(url, model, 1) == (
        400,
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID",
    )
    not_started = (
        400,
        f"inference request for sequence 4343 to model '{model}' must specify the START "
        "flag on the first request of the sequence",
    )
    assert infer(url, model, 1, sequence_id=4343) == not_started
    assert infer(url, model, 1, sequence_id=4343, sequence_start=True, sequence_end=True)[0] == 200
    assert infer(url, model, 1, sequence_id=4343) == not_started  # after END


# ---- load-time checks, in-process --------------------------------------------------------------


def _args(folder, name):
    config = config_to_json(load_model_config(folder, name))
    return {
        "model_config": json.dumps(config),
        "model_name": name,
        "model_version": "1",
        "model_repository": str(folder),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0",
        "model_instance_device_id": "0",
    }


def _onnx_folder(tmp_path, config_text, batched=True):
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(sequence_framework.accumulator_onnx(batched))
    (folder / "config.pbtxt").write_text(config_text.replace('name: "x"', 'name: "m"'))
    return folder


@pytest.mark.parametrize(
    "change, batched, message",
    [
        (
            ('name: "START"', 'name: "BEGIN"'),
            True,
            "configuration specified sequence control 'BEGIN', but model does not provide "
            "that input",
        ),
        (
            ("int32_false_true: [ 0, 1 ]", "fp32_false_true: [ 0, 1 ]"),
            True,
            "unable to load model 'm', sequence control 'START', the model expects data-type "
            "INT32 but the model configuration specifies data-type TYPE_FP32",
        ),
        (
            ("max_batch_size: 0", "max_batch_size: 0"),  # a [1] model under batching below
            None,
            "unable to load model 'm', sequence control 'START' in model has dims [] but "
            "dims [1] is expected",
        ),
        (
            ('state [ { input_name: "STATE_IN"', 'stateless [ { input_name: "STATE_IN"'),
            True,
            "unable to load model 'm', configuration expects 5 inputs, model provides 6",
        ),
        (
            ('output_name: "STATE_OUT"', 'output_name: "NEXT"'),
            True,
            "unexpected inference output state 'NEXT', allowed outputs are: CORRID_OUT, CTRL, "
            "OUTPUT, STATE_OUT",
        ),
        (
            ("data_type: TYPE_FP32 dims: [ 1 ] } ]\n}", "data_type: TYPE_FP64 dims: [ 1 ] } ]\n}"),
            True,
            "unable to load model 'm', configuration expects datatype TYPE_FP64 for input "
            "state 'STATE_IN', model provides TYPE_FP32",
        ),
    ],
)
def test_onnx_sequence_model_checks_at_load(tmp_path, change, batched, message):
    from naiad.backends.onnxruntime import OnnxModelError, OnnxRuntimeBackend

    if batched is None:  # the [1]-shaped model (no batch dimension) under max_batch_size 4
        text = sequence_framework.onnx_config("x", "direct", batched=True)
        folder = _onnx_folder(tmp_path, text, batched=False)
    else:
        text = sequence_framework.onnx_config("x", "direct", batched=batched)
        assert change[0] in text
        if change[0].startswith("state ["):
            start = text.index("  state [")
            text = text[:start] + text[text.index("\n", start) + 1 :]
        else:
            text = text.replace(*change)
        folder = _onnx_folder(tmp_path, text, batched=batched)
    with pytest.raises(OnnxModelError) as error:
        OnnxRuntimeBackend(_args(folder, "m"))
    assert message in error.value.message, error.value.message


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ('name: "START__1"', 'name: "START"'),
            "input 'START' does not follow <name>__<index> naming convention.",
        ),
        (
            ("data_type: TYPE_INT64 } ]", "data_type: TYPE_UINT64 } ]"),
            "input 'CORRID__4' type 'TYPE_UINT64' is not supported by PyTorch.",
        ),
        (
            ('output_name: "STATE_OUT__3"', 'output_name: "STATE_OUT"'),
            "output state 'STATE_OUT' of model 'm' does not follow <name>__<index> naming "
            "convention.",
        ),
        (
            ('input_name: "STATE_IN__5"', 'input_name: "STATE_IN__0"'),
            "state input 'STATE_IN__0' of model 'm' cannot be bound to a forward() argument: "
            "the inputs bind by FORWARD_ARGUMENT, so it must be a forward() argument of that "
            "name",
        ),
    ],
)
def test_pytorch_sequence_model_checks_at_load(tmp_path, change, message):
    pytest.importorskip("torch")
    from naiad.backends.pytorch import PyTorchBackend

    text = sequence_framework.torch_config("m", "direct")
    assert change[0] in text
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    sequence_framework.accumulator_torch().save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(text.replace(*change))
    with pytest.raises(RuntimeError) as error:
        PyTorchBackend(_args(folder, "m"))
    assert message in str(error.value), str(error.value)


def test_pytorch_input_count_counts_controls_and_states(tmp_path):
    pytest.importorskip("torch")
    from naiad.backends.pytorch import PyTorchBackend

    text = sequence_framework.torch_config("m", "direct")
    start = text.index("  state [")
    text = text[:start] + text[text.index("\n", start) + 1 :]
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    sequence_framework.accumulator_torch().save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(text)
    with pytest.raises(RuntimeError) as error:
        PyTorchBackend(_args(folder, "m"))
    assert str(error.value).startswith(
        "unable to load model 'm', configuration expects 5 inputs, model provides 6"
    )


def test_a_sequence_state_lives_in_the_arena_until_end(server):
    """The state of a framework model's sequence is one block of the shared arena from
    START to END (seq_onnx_nobatch: one slot, its earlier sequences ended)."""
    url = server.url

    def blocks(expected=None):
        """The arena's blocks in use, once they settle at `expected` (a request's own
        blocks may be freed a moment after its answer) or after 2 s."""
        deadline = time.monotonic() + 2
        while True:
            arena = requests.get(f"{url}/v2/naiad/arena", timeout=TIMEOUT).json()
            if expected in (None, arena["blocks_in_use"]) or time.monotonic() > deadline:
                return arena["blocks_in_use"]
            time.sleep(0.05)

    before = blocks()
    model = "seq_onnx_nobatch"
    assert infer(url, model, 3, sequence_id=901, sequence_start=True)[1]["OUTPUT"] == [3.0]
    assert blocks(before + 1) == before + 1
    assert infer(url, model, 4, sequence_id=901)[1]["OUTPUT"] == [7.0]
    assert blocks(before + 1) == before + 1  # the same block, rewritten
    assert infer(url, model, 5, sequence_id=901, sequence_end=True)[1]["OUTPUT"] == [12.0]
    assert blocks(before) == before
