"""naiad.Server, the in-process API shaped as Triton's `tritonserver` (issue 42).

One server for the module (explicit mode, the example add_sub, an ensemble over it and
the decoupled `repeat`), with its HTTP and gRPC front ends on free ports: the in-process
answers are checked against what those front ends say for the same request, and the
front ends against tritonclient. A second server, started and stopped twice, checks
that nothing listens unless asked and that a process can start the server again.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys

import naiad
import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from naiad.observability import triton_log
from server_harness import EXAMPLE_MODELS, REPO_ROOT, _free_ports

PIPELINE_MODELS = REPO_ROOT / "tests" / "pipeline_models"
DECOUPLED_MODELS = REPO_ROOT / "tests" / "decoupled_models"
TIMEOUT = 30

# The HTTP status of each error kind (csrc/codec/error_status.h), for the in-process class.
_CLASS_OF_STATUS = {
    400: naiad.InvalidArgumentError,
    404: naiad.NotFoundError,
    500: naiad.InternalError,
    501: naiad.UnsupportedError,
    503: naiad.UnavailableError,
}


@pytest.fixture(scope="module")
def server():
    http_port, grpc_port = _free_ports(2)  # distinct, unlike two free_port()s
    server = naiad.Server(
        model_repository=[str(EXAMPLE_MODELS), str(PIPELINE_MODELS), str(DECOUPLED_MODELS)],
        model_control_mode=naiad.ModelControlMode.EXPLICIT,
        startup_models=["add_sub", "ensemble_add_sub", "repeat", "seq_echo"],
        http_port=http_port,
        grpc_port=grpc_port,
    )
    server.start(wait_until_ready=True)
    server.http_url = f"http://127.0.0.1:{http_port}"
    server.grpc_url = f"127.0.0.1:{grpc_port}"
    yield server
    server.stop()


def _add_sub_inputs(batch: int = 1):
    a = np.arange(16 * batch, dtype=np.float32).reshape(batch, 16)
    b = np.full((batch, 16), 0.5, dtype=np.float32)
    return a, b


def _one(responses) -> naiad.InferenceResponse:
    responses = list(responses)
    assert len(responses) == 1
    assert responses[0].final
    return responses[0]


def _http_error(server, model: str, body: dict) -> tuple[int, str]:
    reply = requests.post(f"{server.http_url}/v2/models/{model}/infer", json=body, timeout=TIMEOUT)
    return reply.status_code, reply.json()["error"]


# -- server ------------------------------------------------------------------------


def test_server_is_live_ready_and_says_its_metadata(server):
    assert server.live() and server.ready()
    metadata = server.metadata()
    assert metadata == requests.get(f"{server.http_url}/v2", timeout=TIMEOUT).json()
    assert "model_repository" in metadata["extensions"]


def test_models_index_has_states_of_loaded_and_never_loaded_models(server):
    models = server.models()
    assert models[("add_sub", 1)].state == "READY"
    assert models[("repeat", 1)].state == "READY"
    assert models[("int_double", -1)].state is None  # in the repository, never loaded
    assert models["add_sub"].version == -1
    with pytest.raises(KeyError):
        models["no_such_model"]
    ready = server.models(exclude_not_ready=True)
    assert ("int_double", -1) not in ready and ("add_sub", 1) in ready


def test_start_twice_is_refused(server):
    with pytest.raises(naiad.InvalidArgumentError, match="Server already started"):
        server.start()


# -- inference -------------------------------------------------------------------------


def test_add_sub_numbers(server):
    a, b = _add_sub_inputs(batch=2)
    response = _one(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    assert response.model.name == "add_sub" and response.model.version == 1
    assert set(response.outputs) == {"OUTPUT0", "OUTPUT1"}
    total = np.from_dlpack(response.outputs["OUTPUT0"])
    difference = response.outputs["OUTPUT1"].to_numpy()
    assert total.dtype == np.float32 and total.shape == (2, 16)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)


def test_add_sub_takes_torch_cpu_tensors_and_gives_them_back(server):
    torch = pytest.importorskip("torch")
    a = torch.arange(16, dtype=torch.float32).reshape(1, 16)
    b = torch.ones(1, 16)
    response = _one(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    total = torch.from_dlpack(response.outputs["OUTPUT0"])
    assert torch.equal(total, a + b)


def test_request_id_and_version_come_back(server):
    a, b = _add_sub_inputs()
    model = server.model("add_sub", 1)
    response = _one(model.infer(inputs={"INPUT0": a, "INPUT1": b}, request_id="r-7"))
    assert response.request_id == "r-7"
    assert response.model.version == 1


def test_ensemble_over_add_sub(server):
    a, b = _add_sub_inputs()
    response = _one(server.model("ensemble_add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    # (a + b) + (a - b) and (a + b) - (a - b)
    np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), 2 * a)
    np.testing.assert_array_equal(response.outputs["OUTPUT1"].to_numpy(), 2 * b)


def test_decoupled_responses_then_the_final_flag_alone(server):
    responses = list(server.model("repeat").infer(inputs={"N": np.array([4], dtype=np.int32)}))
    # "thread" mode: four responses, then the final flag sent alone (as Triton's
    # iterator, an empty response with final set).
    assert [r.final for r in responses] == [False, False, False, False, True]
    assert [r.outputs["OUT"].to_numpy().tolist() for r in responses[:4]] == [[0], [1], [2], [3]]
    assert responses[4].outputs == {}


def test_decoupled_final_flag_on_the_last_response(server):
    responses = list(
        server.model("repeat").infer(
            inputs={"N": np.array([3], dtype=np.int32)}, parameters={"mode": "inline"}
        )
    )
    assert [r.final for r in responses] == [False, False, True]
    assert [int(r.outputs["OUT"].to_numpy()[0]) for r in responses] == [0, 1, 2]


def test_decoupled_error_response_raises_or_is_returned(server):
    inputs = {"N": np.array([2], dtype=np.int32)}
    parameters = {"mode": "error_last"}
    iterator = server.model("repeat").infer(inputs=inputs, parameters=parameters)
    assert int(next(iterator).outputs["OUT"].to_numpy()[0]) == 0
    assert int(next(iterator).outputs["OUT"].to_numpy()[0]) == 1
    with pytest.raises(naiad.TritonError, match="bad things"):
        next(iterator)
    responses = list(
        server.model("repeat").infer(inputs=inputs, parameters=parameters, raise_on_error=False)
    )
    assert len(responses) == 3 and responses[-1].final
    assert isinstance(responses[-1].error, naiad.TritonError)
    assert responses[-1].error.message == "bad things"


def test_cancel_reaches_the_running_request(server):
    iterator = server.model("repeat").infer(
        inputs={"N": np.array([0], dtype=np.int32)}, parameters={"mode": "until_cancelled"}
    )
    first = next(iterator)  # running: it sends until it sees is_cancelled()
    assert not first.final
    iterator.cancel()
    rest = list(iterator)
    assert rest and rest[-1].final and rest[-1].outputs == {}


def test_async_infer(server):
    a, b = _add_sub_inputs()

    async def run():
        numbers = []
        async for response in server.model("repeat").async_infer(
            inputs={"N": np.array([3], dtype=np.int32)}, parameters={"mode": "inline"}
        ):
            numbers.append(int(response.outputs["OUT"].to_numpy()[0]))
        results = []
        for _ in range(2):
            model = server.model("add_sub")
            iterator = model.async_infer(inputs={"INPUT0": a, "INPUT1": b})
            results.append([response async for response in iterator])
        return numbers, results

    numbers, results = asyncio.run(run())
    assert numbers == [0, 1, 2]
    for responses in results:
        assert len(responses) == 1 and responses[0].final
        np.testing.assert_array_equal(responses[0].outputs["OUTPUT0"].to_numpy(), a + b)


def test_bytes_tensors_round_trip(server):
    # identity_bytes (the example repository's BYTES model), loaded for this test.
    server.load("identity_bytes")
    try:
        config = server.model("identity_bytes").config()
        name_in, name_out = config["input"][0]["name"], config["output"][0]["name"]
        shape = [1, 2] if config.get("max_batch_size", 0) > 0 else [2]
        values = np.array(["hello", "wörld"], dtype=object).reshape(shape)
        response = _one(server.model("identity_bytes").infer(inputs={name_in: values}))
        out = response.outputs[name_out]
        assert out.data_type == "BYTES"
        assert (
            out.to_bytes_array().tolist()
            == np.array([b"hello", "wörld".encode()], dtype=object).reshape(shape).tolist()
        )
        assert out.to_string_array().reshape(-1).tolist() == ["hello", "wörld"]
        with pytest.raises(naiad.UnsupportedError):
            np.from_dlpack(out)
    finally:
        server.unload("identity_bytes")


def test_sequence_by_correlation_id_and_flags(server):
    model = server.model("seq_echo")
    totals = []
    for value, flags in ((3, naiad.SEQUENCE_START), (4, 0), (5, naiad.SEQUENCE_END)):
        response = _one(
            model.infer(
                inputs={"INPUT": np.array([[value]], dtype=np.int32)},
                correlation_id=4242,
                flags=flags,
            )
        )
        totals.append(int(response.outputs["TOTAL"].to_numpy().ravel()[0]))
        start_end = response.outputs["CTRL"].to_numpy().ravel().tolist()
        assert start_end == [int(flags == naiad.SEQUENCE_START), int(flags == naiad.SEQUENCE_END)]
    assert totals == [3, 7, 12]


def test_metrics_count_requests(server):
    line = 'nv_inference_request_success{model="add_sub",version="1"}'

    def count() -> float:
        for text in server.metrics().splitlines():
            if text.startswith(line):
                return float(text.split()[-1])
        return 0.0

    before = count()
    a, b = _add_sub_inputs()
    _one(server.model("add_sub").infer(inputs={"INPUT0": a, "INPUT1": b}))
    assert count() == before + 1


# -- errors: Triton's classes, the HTTP front end's messages ----------------------------


def test_missing_input_is_invalid_argument_with_the_http_message(server):
    a, _ = _add_sub_inputs()
    with pytest.raises(naiad.InvalidArgumentError) as raised:
        server.model("add_sub").infer(inputs={"INPUT0": a})
    status, message = _http_error(
        server,
        "add_sub",
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a.ravel().tolist()}
            ]
        },
    )
    assert status == 400
    assert raised.value.message == message
    assert "missing required input(s) ['INPUT1']" in message


def test_wrong_datatype_and_shape_give_the_http_messages(server):
    a, b = _add_sub_inputs()
    cases = [
        ({"INPUT0": a.astype(np.float64), "INPUT1": b}, "FP64", [1, 16]),
        ({"INPUT0": np.zeros((1, 8), np.float32), "INPUT1": b}, "FP32", [1, 8]),
    ]
    for inputs, datatype, shape in cases:
        with pytest.raises(naiad.InvalidArgumentError) as raised:
            server.model("add_sub").infer(inputs=inputs)
        first = inputs["INPUT0"]
        body = {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": datatype,
                    "shape": shape,
                    "data": first.ravel().tolist(),
                },
                {
                    "name": "INPUT1",
                    "datatype": "FP32",
                    "shape": [1, 16],
                    "data": b.ravel().tolist(),
                },
            ]
        }
        status, message = _http_error(server, "add_sub", body)
        assert status == 400
        assert raised.value.message == message
        assert "INPUT0" in message


def test_unknown_model_is_not_found_with_the_http_message(server):
    with pytest.raises(naiad.NotFoundError) as raised:
        server.model("no_such_model").infer(inputs={"X": np.zeros(1, np.float32)})
    reply = requests.get(f"{server.http_url}/v2/models/no_such_model", timeout=TIMEOUT)
    assert reply.status_code == 404
    assert raised.value.message == reply.json()["error"]
    with pytest.raises(naiad.NotFoundError):
        server.model("no_such_model").metadata()
    assert not server.model("no_such_model").ready()


def test_input_type_without_a_tensor_is_invalid_argument(server):
    with pytest.raises(naiad.InvalidArgumentError, match="not supported"):
        server.model("add_sub").infer(inputs={"INPUT0": object(), "INPUT1": object()})


# -- metadata, config, statistics --------------------------------------------------------


def test_metadata_config_statistics_as_the_http_front_end(server):
    model = server.model("add_sub")
    assert model.ready()
    for path, value in (("", model.metadata()), ("/config", model.config())):
        assert (
            value
            == requests.get(f"{server.http_url}/v2/models/add_sub{path}", timeout=TIMEOUT).json()
        )
    before = model.statistics()["model_stats"][0]["inference_stats"]["success"]["count"]
    a, b = _add_sub_inputs()
    _one(model.infer(inputs={"INPUT0": a, "INPUT1": b}))
    after = model.statistics()["model_stats"][0]["inference_stats"]["success"]["count"]
    assert after == before + 1


# -- load and unload (explicit mode) -----------------------------------------------------


def test_load_infer_unload(server):
    assert not server.model("int_double").ready()
    model = server.load("int_double")
    assert model.ready()
    assert server.models()[("int_double", 1)].state == "READY"
    response = _one(model.infer(inputs={"X": np.array([21], dtype=np.int32)}))
    assert response.outputs["Y"].to_numpy().tolist() == [42]

    server.unload("int_double", wait_until_unloaded=True)
    assert not model.ready()
    assert server.models()[("int_double", 1)].state == "UNAVAILABLE"
    with pytest.raises(naiad.TritonError) as raised:
        model.infer(inputs={"X": np.array([1], dtype=np.int32)})
    status, message = _http_error(
        server,
        "int_double",
        {"inputs": [{"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}]},
    )
    assert raised.value.message == message
    assert type(raised.value) is _CLASS_OF_STATUS[status]


def test_load_of_a_model_not_in_the_repository_fails(server):
    with pytest.raises(naiad.TritonError) as raised:
        server.load("no_such_model")
    reply = requests.post(
        f"{server.http_url}/v2/repository/models/no_such_model/load", timeout=TIMEOUT
    )
    assert raised.value.message == reply.json()["error"]
    assert "no_such_model" in raised.value.message
    assert type(raised.value) is _CLASS_OF_STATUS[reply.status_code]


def test_a_registered_repository_serves_a_folder_under_its_mapped_name(server, tmp_path):
    shutil.copytree(EXAMPLE_MODELS / "add_sub", tmp_path / "model")
    server.register_model_repository(str(tmp_path), {"model": "add_sub_mapped"})
    with pytest.raises(naiad.AlreadyExistsError):
        server.register_model_repository(str(tmp_path), {})
    model = server.load("add_sub_mapped")
    a, b = _add_sub_inputs()
    response = _one(model.infer(inputs={"INPUT0": a, "INPUT1": b}))
    assert response.outputs["OUTPUT0"].to_numpy().tolist() == (a + b).tolist()
    assert server.models()[("add_sub_mapped", 1)].state == "READY"
    server.unload("add_sub_mapped")
    server.unregister_model_repository(str(tmp_path))
    with pytest.raises(naiad.TritonError, match="no model folder 'add_sub_mapped'"):
        server.load("add_sub_mapped")
    with pytest.raises(naiad.InvalidArgumentError, match="failed to unregister"):
        server.unregister_model_repository(str(tmp_path))


# -- the optional front ends ----------------------------------------------------------------


def test_http_front_end_answers_tritonclient(server):
    client = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready("add_sub")
    a, b = _add_sub_inputs()
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "FP32"),
        httpclient.InferInput("INPUT1", [1, 16], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    client.close()


def test_grpc_front_end_answers_tritonclient(server):
    # tritonclient.grpc registers Triton's model_config.proto in protobuf's default pool,
    # as naiad's own protos do: the two cannot be imported in one process, so the gRPC
    # client runs in a process of its own.
    script = f"""
import numpy as np, tritonclient.grpc as grpcclient
client = grpcclient.InferenceServerClient("{server.grpc_url}")
assert client.is_server_live() and client.is_model_ready("add_sub")
a = np.arange(16, dtype=np.float32).reshape(1, 16)
b = np.full((1, 16), 0.5, dtype=np.float32)
inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(b)
result = client.infer("add_sub", inputs)
print(result.as_numpy("OUTPUT1").ravel().tolist())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    a, b = _add_sub_inputs()
    assert eval(done.stdout) == (a - b).ravel().tolist()


# -- a second server: no ports, started twice ------------------------------------------------


def _listening_sockets() -> set[int]:
    """Inodes of the TCP sockets this process listens on."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    listening.add(int(fields[9]))
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match:
            ours.add(int(match.group(1)))
    return listening & ours


def test_start_stop_twice_without_ports(server):
    before = _listening_sockets()
    log_settings = triton_log.settings()
    second = naiad.Server(
        model_repository=str(EXAMPLE_MODELS),
        model_control_mode="explicit",
        log_info=not log_settings["log_info"],
        log_verbose=log_settings["log_verbose_level"] + 2,
    )

    def serve_once(started):
        assert started.ready()
        assert _listening_sockets() == before  # no front end unless a port is given
        model = started.load("add_sub")
        a, b = _add_sub_inputs()
        response = _one(model.infer(inputs={"INPUT0": a, "INPUT1": b}))
        np.testing.assert_array_equal(response.outputs["OUTPUT0"].to_numpy(), a + b)

    serve_once(second.start(wait_until_ready=True))
    assert triton_log.settings()["log_verbose_level"] == log_settings["log_verbose_level"] + 2
    second.stop()
    # The log settings are the process's: stop gives back the ones it found.
    assert triton_log.settings() == log_settings
    with pytest.raises(naiad.InvalidArgumentError, match="Server not started"):
        second.ready()
    with second as started:  # the context manager starts it again and stops it
        serve_once(started)
    with pytest.raises(naiad.InvalidArgumentError, match="Server not started"):
        second.model("add_sub")
    # The module's server still serves.
    assert server.ready()


def test_bad_options_are_invalid_argument():
    with pytest.raises(naiad.InvalidArgumentError, match="Model repository must be specified"):
        naiad.Server().start()
    with pytest.raises(naiad.InvalidArgumentError, match="--model-control-mode"):
        naiad.Server(model_repository=str(EXAMPLE_MODELS), model_control_mode="sometimes").start()
    with pytest.raises(naiad.InvalidArgumentError, match="failed to stat model repository path"):
        naiad.Server(model_repository="/nonexistent/models").start()
    with pytest.raises(naiad.InvalidArgumentError, match="Server not started"):
        naiad.Server(model_repository=str(EXAMPLE_MODELS)).model("add_sub")


def _children() -> set[int]:
    """PIDs of this process's child processes (the workers a server started)."""
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                children.add(int(entry))
    return children


def test_failed_starts_leave_nothing_running(tmp_path):
    before = _children()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = naiad.Server(
            model_repository=str(EXAMPLE_MODELS),
            model_control_mode="explicit",
            startup_models=["add_sub"],
            http_port=taken.getsockname()[1],
        )
        with pytest.raises(naiad.UnavailableError, match="Address already in use"):
            server.start()
    assert _children() == before  # add_sub's worker was stopped again
    with pytest.raises(naiad.InvalidArgumentError, match="Server not started"):
        server.ready()

    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(
        'name: "broken"\nbackend: "python"\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    (broken / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no')\n"
    )
    with pytest.raises(naiad.InternalError, match="failed to load all models"):
        naiad.Server(model_repository=str(tmp_path)).start()
    assert _children() == before


def test_tensor_conversions_keep_shape_datatype_and_values():
    cases = [
        (np.float32(3), "FP32", []),
        (np.arange(6, dtype=">i4").reshape(2, 3)[:, ::2], "INT32", [2, 2]),  # strided, big-endian
        (np.array([True, False]), "BOOL", [2]),
        (np.array([1.5, -2], dtype=np.float16), "FP16", [2]),
        ([[1, 2], [3, 4]], "INT64", [2, 2]),
    ]
    for value, data_type, shape in cases:
        tensor = naiad.Tensor._from_object(value)
        assert (tensor.data_type, tensor.shape) == (data_type, shape)
        np.testing.assert_array_equal(np.from_dlpack(tensor), np.asarray(value))
    strings = naiad.Tensor._from_object(np.array([["a", "ü"]]))
    assert (strings.data_type, strings.shape) == ("BYTES", [1, 2])
    assert strings.to_bytes_array().tolist() == [[b"a", "ü".encode()]]
    assert strings.to_string_array().tolist() == [["a", "ü"]]
    with pytest.raises(naiad.InvalidArgumentError, match="not BYTES"):
        naiad.Tensor._from_object(np.zeros(2, np.float32)).to_bytes_array()
