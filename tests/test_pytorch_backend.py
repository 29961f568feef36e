"""The pytorch backend, black-box over HTTP: TorchScript models built by tests/torch_models.py
served by one module-scoped server (torch is slow to import: one server, few workers).

Checked against the rules of Triton's pytorch backend: inputs bound by forward() argument
name or by `<name>__<index>`; outputs by `<name>__<index>`; every datatype it supports (and
List[str] for TYPE_STRING); Triton's message for a model that fails at run time (the
instance keeps serving); a corrupt model file makes only that model UNAVAILABLE.
test_pytorch_load.py runs the other rules (config order, a Dict input, an output of the
wrong datatype) in-process, sparing this server a worker each.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading

import numpy as np
import pytest
import requests

torch = pytest.importorskip("torch")
httpclient = pytest.importorskip("tritonclient.http")

from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository  # noqa: E402
from torch_models import DTYPES, build_repository  # noqa: E402

TIMEOUT = 30

SERVED = [
    "pt_batching",
    "pt_dtypes",
    "pt_named",
    "pt_rejects",
    "pt_strings",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("pytorch")
    repository = build_repository(root / "models", SERVED)
    make_repository(repository, ["mlp_torch"])  # the example, as `make serve` serves it
    corrupt = repository / "pt_corrupt"
    (corrupt / "1").mkdir(parents=True)
    (corrupt / "config.pbtxt").write_text((repository / "pt_named" / "config.pbtxt").read_text())
    (corrupt / "1" / "model.pt").write_bytes(b"this is not a TorchScript archive")
    naiad = NaiadServer(
        repository, log_dir=root, extra_args=["--exit-on-error=false"], name="pytorch"
    )
    naiad.start(wait="live", timeout=180)
    try:
        _wait_loaded(naiad, [*SERVED, "mlp_torch", "pt_corrupt"])
        yield naiad
    finally:
        naiad.stop()


def _wait_loaded(naiad, names, timeout=180.0):
    """Until every model has left LOADING."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        index = _index(naiad)
        states = {entry["name"]: entry.get("state") for entry in index}
        if all(states.get(name) in ("READY", "UNAVAILABLE") for name in names):
            return
        time.sleep(0.2)
    raise TimeoutError(f"models still loading: {states}\n{naiad.stderr_text()[-3000:]}")


def _index(naiad) -> list:
    reply = requests.post(naiad.url + "/v2/repository/index", data=b"{}", timeout=TIMEOUT)
    assert reply.status_code == 200, reply.content
    return reply.json()


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(f"{server.host}:{server.http_port}") as c:
        yield c


def _input(name, array, datatype=None):
    from tritonclient.utils import np_to_triton_dtype

    tensor = httpclient.InferInput(
        name, list(array.shape), datatype or np_to_triton_dtype(array.dtype)
    )
    tensor.set_data_from_numpy(array, binary_data=True)
    return tensor


def _post_json(server, model, body):
    return requests.post(
        f"{server.url}/v2/models/{model}/infer", data=json.dumps(body), timeout=TIMEOUT
    )


def test_models_ready_and_corrupt_one_unavailable(server):
    states = {entry["name"]: entry for entry in _index(server)}
    for name in [*SERVED, "mlp_torch"]:
        assert states[name]["state"] == "READY", (name, states[name])
    corrupt = states["pt_corrupt"]
    assert corrupt["state"] == "UNAVAILABLE"
    assert "failed to load model 'pt_corrupt'" in corrupt["reason"], corrupt
    assert "pt_corrupt/1/model.pt" in corrupt["reason"], corrupt
    assert (
        requests.get(f"{server.url}/v2/models/pt_corrupt/ready", timeout=TIMEOUT).status_code != 200
    )


def test_example_classifier_matches_torch(server, client):
    features = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], dtype=np.float32)
    result = client.infer("mlp_torch", [_input("INPUT__0", features)])
    model = torch.jit.load(str(EXAMPLE_MODELS / "mlp_torch" / "1" / "model.pt"))
    with torch.inference_mode():
        probabilities, classes = model(torch.from_numpy(features))
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), probabilities.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), classes.numpy())
    assert result.as_numpy("OUTPUT__1").dtype == np.int64


def test_concurrent_requests_form_one_batch(server):
    """preferred_batch_size 4 with a long delay: four requests sent together run as one
    batch, and each gets its own rows back. Each client first sends a request to a model
    without a delay, so the server knows four connections that may still send (a batch
    leaves early only when every known connection waits for an answer)."""
    rows = [np.full((1, 4), float(i), dtype=np.float32) for i in range(4)]
    all_known = threading.Barrier(len(rows))

    def send(array):
        # A client per thread (tritonclient.http's gevent cannot switch threads).
        with httpclient.InferenceServerClient(f"{server.host}:{server.http_port}") as c:
            c.infer("mlp_torch", [_input("INPUT__0", array)])
            all_known.wait(timeout=TIMEOUT)
            return c.infer("pt_batching", [_input("INPUT__0", array)]).as_numpy("OUTPUT__0")

    with concurrent.futures.ThreadPoolExecutor(len(rows)) as pool:
        answers = list(pool.map(send, rows))
    model = _scripted("pt_batching", server)
    with torch.inference_mode():
        expected = model(torch.from_numpy(np.concatenate(rows)))[0].numpy()
    for index, answer in enumerate(answers):
        np.testing.assert_allclose(answer, expected[index : index + 1], rtol=1e-5)
    stats = requests.get(f"{server.url}/v2/models/pt_batching/stats", timeout=TIMEOUT).json()
    batches = {entry["batch_size"]: entry for entry in stats["model_stats"][0]["batch_stats"]}
    assert list(batches) == [4], stats
    assert stats["model_stats"][0]["execution_count"] == 1, stats


def _scripted(name, server):
    return torch.jit.load(str(server.repository / name / "1" / "model.pt"))


def test_every_supported_datatype_round_trips(client):
    rng = np.random.default_rng(3)
    arrays = []
    for name, _dtype in DTYPES:
        if name == "BOOL":
            array = rng.integers(0, 2, (2, 3)).astype(np.bool_)
        elif name.startswith("FP"):
            array = rng.standard_normal((2, 3)).astype(
                {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}[name]
            )
        else:
            info = np.iinfo(getattr(np, name.lower()))
            array = rng.integers(
                info.min, info.max, (2, 3), endpoint=True, dtype=getattr(np, name.lower())
            )
        arrays.append(array)
    inputs = [_input(f"INPUT__{i}", array) for i, array in enumerate(arrays)]
    result = client.infer("pt_dtypes", inputs)
    response = result.get_response()
    datatypes = {output["name"]: output["datatype"] for output in response["outputs"]}
    for i, ((name, _), array) in enumerate(zip(DTYPES, arrays)):
        assert datatypes[f"OUTPUT__{i}"] == name
        np.testing.assert_array_equal(result.as_numpy(f"OUTPUT__{i}"), array)


def test_inputs_bind_by_forward_argument_name(client):
    """Config order (subtrahend, minuend) differs from forward(minuend, subtrahend)."""
    minuend = np.array([[10, 20]], dtype=np.float32)
    subtrahend = np.array([[1, 2]], dtype=np.float32)
    result = client.infer(
        "pt_named", [_input("subtrahend", subtrahend), _input("minuend", minuend)]
    )
    np.testing.assert_array_equal(result.as_numpy("difference"), [[9, 18]])


def test_strings_as_list_of_str(server):
    body = {
        "inputs": [{"name": "INPUT__0", "shape": [2], "datatype": "BYTES", "data": ["ab", "naiad"]}]
    }
    reply = _post_json(server, "pt_strings", body)
    assert reply.status_code == 200, reply.content
    (output,) = reply.json()["outputs"]
    assert output["datatype"] == "BYTES" and output["shape"] == [2]
    assert output["data"] == ["AB", "NAIAD"]


def test_model_failure_at_run_time_is_an_error_and_the_instance_keeps_serving(server):
    bad = {"inputs": [{"name": "INPUT__0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
    reply = _post_json(server, "pt_rejects", bad)
    assert reply.status_code == 500, reply.content
    error = reply.json()["error"]
    assert error.startswith("PyTorch execute failure: "), error
    assert "mat1 and mat2 shapes cannot be multiplied" in error, error
    good = {
        "inputs": [{"name": "INPUT__0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]
    }
    reply = _post_json(server, "pt_rejects", good)
    assert reply.status_code == 200, reply.content
    assert reply.json()["outputs"][0]["data"] == [10, 10]


def test_requested_outputs_only(client):
    features = np.zeros((1, 4), dtype=np.float32)
    result = client.infer(
        "mlp_torch",
        [_input("INPUT__0", features)],
        outputs=[httpclient.InferRequestedOutput("OUTPUT__1")],
    )
    names = [output["name"] for output in result.get_response()["outputs"]]
    assert names == ["OUTPUT__1"]


def test_config_shows_auto_completed_backend_and_normalized_instance_group(server):
    """pt_named's config.pbtxt names no backend: auto-complete takes it from model.pt."""
    config = requests.get(f"{server.url}/v2/models/pt_named/config", timeout=TIMEOUT).json()
    assert config["backend"] == "pytorch" and config["platform"] == "pytorch_libtorch"
    assert config["default_model_filename"] == "model.pt"
    (group,) = config["instance_group"]
    # As Triton: on the host's GPUs where this torch can use them, else the CPU.
    from naiad.memory import gpu
    from naiad.repository.instance_groups import backend_runs_on_gpu

    gpus = gpu.supported_gpus() if backend_runs_on_gpu("pytorch") else []
    assert (group["name"], group["kind"], group["count"], group["gpus"]) == (
        "pt_named",
        "KIND_GPU" if gpus else "KIND_CPU",
        1,
        gpus,
    )


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs PyTorch with CUDA and a CUDA device (the tests install torch's CPU build)",
)
def test_gpu_instance_runs_on_its_device(tmp_path):
    from torch_models import MODELS, build_model

    config = MODELS["pt_batching"][0] + "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n"
    build_model(tmp_path / "models", "pt_batching", config)
    naiad = NaiadServer(tmp_path / "models", log_dir=tmp_path, name="pytorch-gpu")
    naiad.start(wait="ready", timeout=180)
    try:
        features = np.arange(8, dtype=np.float32).reshape(2, 4)
        with httpclient.InferenceServerClient(f"{naiad.host}:{naiad.http_port}") as c:
            result = c.infer("pt_batching", [_input("INPUT__0", features)])
        model = _scripted("pt_batching", naiad)
        with torch.inference_mode():
            expected = model(torch.from_numpy(features))[0].numpy()
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-5)
    finally:
        naiad.stop()
