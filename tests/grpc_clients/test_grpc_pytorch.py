"""The pytorch backend over gRPC (tritonclient.grpc): dynamic batching, every datatype, and a
model failing at run time (INTERNAL with Triton's message, the instance keeps serving).
TorchScript models from tests/torch_models.py; run apart from the main suite
(tests/grpc_clients/conftest.py says why)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import requests

torch = pytest.importorskip("torch")
grpcclient = pytest.importorskip("tritonclient.grpc")

from server_harness import NaiadServer  # noqa: E402
from torch_models import DTYPES, build_repository  # noqa: E402
from tritonclient.utils import InferenceServerException, np_to_triton_dtype  # noqa: E402

TIMEOUT = 30


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-pytorch")
    repository = build_repository(root / "models", ["pt_batching", "pt_dtypes", "pt_rejects"])
    naiad = NaiadServer(repository, log_dir=root, name="grpc-pytorch")
    naiad.start(wait="ready", timeout=180)
    yield naiad
    naiad.stop()


@pytest.fixture(scope="module")
def client(server):
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as c:
        yield c


def _input(name, array):
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def test_concurrent_calls_form_one_batch(server):
    """Four calls at once, one per connection, each connection having made one call before
    (to a model without a delay): the server knows four connections that may still call,
    so the batch waits for preferred_batch_size 4."""
    rows = [np.full((1, 4), float(i), dtype=np.float32) for i in range(4)]
    results = [None] * 4
    done = threading.Semaphore(0)

    def keep(index):
        def callback(result, error):
            results[index] = error if error is not None else result.as_numpy("OUTPUT__0")
            done.release()

        return callback

    # A subchannel pool of its own per client: one TCP connection each (grpcio would
    # otherwise share one connection between channels to the same address).
    clients = [
        grpcclient.InferenceServerClient(
            f"{server.host}:{server.grpc_port}",
            channel_args=[("grpc.use_local_subchannel_pool", 1)],
        )
        for _ in rows
    ]
    try:
        for c in clients:
            c.infer("pt_dtypes", _dtype_inputs(np.random.default_rng(0), rows=1))
        for index, (c, row) in enumerate(zip(clients, rows)):
            c.async_infer("pt_batching", [_input("INPUT__0", row)], keep(index))
        for _ in rows:
            assert done.acquire(timeout=TIMEOUT)
    finally:
        for c in clients:
            c.close()
    model = torch.jit.load(str(server.repository / "pt_batching" / "1" / "model.pt"))
    with torch.inference_mode():
        expected = model(torch.from_numpy(np.concatenate(rows)))[0].numpy()
    for index, answer in enumerate(results):
        assert not isinstance(answer, Exception), answer
        np.testing.assert_allclose(answer, expected[index : index + 1], rtol=1e-5)
    stats = requests.get(f"{server.url}/v2/models/pt_batching/stats", timeout=TIMEOUT).json()
    assert [entry["batch_size"] for entry in stats["model_stats"][0]["batch_stats"]] == [4]


def _dtype_arrays(rng, rows=3):
    """One [rows, 2] array per datatype of DTYPES, random over the type's whole range."""
    arrays = []
    for name, _dtype in DTYPES:
        if name == "BOOL":
            arrays.append(rng.integers(0, 2, (rows, 2)).astype(np.bool_))
        elif name.startswith("FP"):
            arrays.append(rng.standard_normal((rows, 2)).astype(f"<f{int(name[2:]) // 8}"))
        else:
            dtype = np.dtype(name.lower())
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, (rows, 2), endpoint=True, dtype=dtype))
    return arrays


def _dtype_inputs(rng, rows=3):
    return [_input(f"INPUT__{i}", array) for i, array in enumerate(_dtype_arrays(rng, rows))]


def test_every_supported_datatype_round_trips(client):
    arrays = _dtype_arrays(np.random.default_rng(5))
    result = client.infer(
        "pt_dtypes", [_input(f"INPUT__{i}", array) for i, array in enumerate(arrays)]
    )
    outputs = {output.name: output.datatype for output in result.get_response().outputs}
    for i, ((name, _dtype), array) in enumerate(zip(DTYPES, arrays)):
        assert outputs[f"OUTPUT__{i}"] == name
        np.testing.assert_array_equal(result.as_numpy(f"OUTPUT__{i}"), array)


def test_model_failure_is_internal_and_the_instance_keeps_serving(client):
    with pytest.raises(InferenceServerException) as error:
        client.infer("pt_rejects", [_input("INPUT__0", np.ones((1, 3), np.float32))])
    assert error.value.status() == "StatusCode.INTERNAL"
    assert error.value.message().startswith("PyTorch execute failure: ")
    result = client.infer("pt_rejects", [_input("INPUT__0", np.ones((2, 4), np.float32))])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), np.full((2, 2), 4, np.float32))
