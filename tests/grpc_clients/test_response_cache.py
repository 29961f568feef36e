"""The response cache (`response_cache { enable: true }` with `--cache-config local,size=N`),
black-box against a real `naiad serve`: repeated requests over HTTP (binary and JSON) and
gRPC are hits with the right outputs, other inputs miss, statistics and metrics count as
Triton 2.51 counts them (checked against it: a hit is a success that adds no inference or
execution, a miss counts once its result is kept), LRU eviction by bytes, a reload drops
the model's entries, shm outputs bypass the cache, decoupled and sequence models with the
cache fail to load with Triton's message, and without --cache-config nothing is cached.
The main server runs twice: with the C++ lanes and with --fast-lane=false (the general
path), which use the one C++ cache."""

from __future__ import annotations

import json
import queue
import socket

import cache_support
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from cache_support import metrics
from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository, metric_value
from shm_support import Region
from tritonclient.utils import InferenceServerException

TIMEOUT = 20
MODEL = "add_sub_cache"


def _add_sub_cache(dest):
    """add_sub with the cache enabled, under `dest`/add_sub_cache."""
    repository = make_repository(dest, {MODEL: EXAMPLE_MODELS / "add_sub"})
    config = repository / MODEL / "config.pbtxt"
    text = config.read_text().replace('name: "add_sub"', f'name: "{MODEL}"')
    config.write_text(text + "\nresponse_cache { enable: true }\n")
    return repository


@pytest.fixture(scope="module", params=["lane", "general"])
def server(request, tmp_path_factory):
    repository = _add_sub_cache(tmp_path_factory.mktemp("cache_repo"))
    make_repository(repository, ["add_sub"])
    refused = {
        "repeat_cache": EXAMPLE_MODELS.parent / "tests" / "decoupled_models" / "repeat",
    }
    make_repository(repository, refused)
    config = repository / "repeat_cache" / "config.pbtxt"
    config.write_text(
        config.read_text().replace('name: "repeat"', 'name: "repeat_cache"')
        + "\nresponse_cache { enable: true }\n"
    )
    extra = ["--cache-config", "local,size=1048576", "--exit-on-error=false"]
    extra += ["--model-control-mode=explicit", "--load-model=*"]
    if request.param == "general":
        extra.append("--fast-lane=false")
    log_dir = tmp_path_factory.mktemp(f"cache_{request.param}")
    with NaiadServer(repository, log_dir=log_dir, extra_args=extra) as running:
        running.lane = request.param == "lane"
        yield running


def inputs(base: float, binary: bool = True):
    a = (np.arange(16, dtype=np.float32) + base).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    tensors = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        tensors.append(tensor)
    return tensors, a + b, a - b


def grpc_inputs(base: float):
    a = (np.arange(16, dtype=np.float32) + base).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.float32)
    tensors = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors, a + b, a - b


def stats(server, model=MODEL):
    return cache_support.stats(server, model)


def counts(server, model=MODEL):
    s = stats(server, model)
    return s["inference_count"], s["execution_count"], s["success"], s["hit"], s["miss"]


@pytest.fixture
def client(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


def test_repeated_requests_hit_with_the_right_outputs(server, client):
    before = counts(server)
    tensors, total, difference = inputs(100.0)
    first = client.infer(MODEL, tensors)
    np.testing.assert_array_equal(first.as_numpy("OUTPUT0"), total)
    assert counts(server) == tuple(
        x + d for x, d in zip(before, (1, 1, 1, 0, 1))
    )  # a miss: the model ran
    for _ in range(3):
        again = client.infer(MODEL, inputs(100.0)[0])
        np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), total)
        np.testing.assert_array_equal(again.as_numpy("OUTPUT1"), difference)
    # Hits: successes, no inference or execution (Triton's counting).
    assert counts(server) == tuple(x + d for x, d in zip(before, (1, 1, 4, 3, 1)))
    s = stats(server)
    assert s["queue"] == s["success"] and s["hit_ns"] > 0 and s["miss_ns"] > 0
    # Another input misses.
    other, other_total, _ = inputs(200.0)
    np.testing.assert_array_equal(client.infer(MODEL, other).as_numpy("OUTPUT0"), other_total)
    assert counts(server) == tuple(x + d for x, d in zip(before, (2, 2, 5, 3, 2)))


def test_lane_counts_the_http_requests_it_queues_answers_from_the_cache_and_refuses(server, client):
    # /v2/naiad/lanes: the C++ I/O loop counts what its turns take (they hand Python no
    # counts); the general path takes none of them.
    def lanes():
        reply = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
        return reply["lane_requests"], reply["lane_cached"], reply["lane_refused"]

    before = lanes()
    tensors, total, _ = inputs(4242.0)
    client.infer(MODEL, tensors)  # a miss: queued
    hit = client.infer(MODEL, tensors)
    np.testing.assert_array_equal(hit.as_numpy("OUTPUT0"), total)
    wrong = httpclient.InferInput("INPUT0", [1, 8], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 8), dtype=np.float32), binary_data=True)
    with pytest.raises(InferenceServerException, match="INPUT0"):
        client.infer(MODEL, [wrong, tensors[1]])
    queued, cached, refused = (now - then for now, then in zip(lanes(), before))
    assert (queued, cached, refused) == ((1, 1, 1) if server.lane else (0, 0, 0))


def test_json_and_grpc_requests_share_the_entry(server, client):
    tensors, total, difference = inputs(300.0)
    client.infer(MODEL, tensors)  # fills the entry (binary)
    before = counts(server)
    json_tensors, _, _ = inputs(300.0, binary=False)
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0", "OUTPUT1")
    ]
    reply = client.infer(MODEL, json_tensors, outputs=outputs)
    body = reply.get_response()
    assert all("data" in output for output in body["outputs"])  # JSON outputs, as asked
    np.testing.assert_array_equal(reply.as_numpy("OUTPUT1"), difference)
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        result = grpc.infer(MODEL, grpc_inputs(300.0)[0], request_id="g-1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), total)
        assert result.get_response().id == "g-1"
        fresh, fresh_total, _ = grpc_inputs(400.0)
        np.testing.assert_array_equal(grpc.infer(MODEL, fresh).as_numpy("OUTPUT0"), fresh_total)
        np.testing.assert_array_equal(
            grpc.infer(MODEL, grpc_inputs(400.0)[0]).as_numpy("OUTPUT0"), fresh_total
        )
    finally:
        grpc.close()
    # Hits: JSON, gRPC, gRPC again; one miss (the gRPC request with new inputs).
    assert counts(server) == tuple(x + d for x, d in zip(before, (1, 1, 4, 3, 1)))


def test_streamed_requests_hit(server):
    """ModelStreamInfer requests of a model that is not decoupled: a hit is answered with
    its ModelStreamInferResponse (by the C++ lane, or the general path)."""
    results = queue.Queue()
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    before = counts(server)
    try:
        grpc.start_stream(callback=lambda result, error: results.put((result, error)))
        tensors, total, _ = grpc_inputs(900.0)
        for index in range(2):
            grpc.async_stream_infer(MODEL, grpc_inputs(900.0)[0], request_id=f"s-{index}")
            result, error = results.get(timeout=TIMEOUT)
            assert error is None
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), total)
            assert result.get_response().id == f"s-{index}"
        grpc.stop_stream()
    finally:
        grpc.close()
    assert counts(server) == tuple(x + d for x, d in zip(before, (1, 1, 2, 1, 1)))


def test_requested_outputs_are_part_of_the_key(server, client):
    tensors, _, difference = inputs(500.0)
    client.infer(MODEL, tensors)
    before = counts(server)
    only = [httpclient.InferRequestedOutput("OUTPUT1")]
    for _ in range(2):
        reply = client.infer(MODEL, inputs(500.0)[0], outputs=only)
        assert [o["name"] for o in reply.get_response()["outputs"]] == ["OUTPUT1"]
        np.testing.assert_array_equal(reply.as_numpy("OUTPUT1"), difference)
    # The first asked for another set of outputs (a miss), the second hit.
    assert counts(server) == tuple(x + d for x, d in zip(before, (1, 1, 2, 1, 1)))


def test_metrics_count_as_statistics(server, client):
    client.infer(MODEL, inputs(600.0)[0])
    client.infer(MODEL, inputs(600.0)[0])
    s = stats(server)
    page = metrics(server)
    labels = f'{{model="{MODEL}",version="1"}}'
    assert metric_value(page, f"nv_cache_num_hits_per_model{labels}") == s["hit"]
    assert metric_value(page, f"nv_cache_num_misses_per_model{labels}") == s["miss"]
    assert metric_value(page, f"nv_cache_hit_duration_per_model{labels}") == s["hit_ns"] // 1000
    assert metric_value(page, f"nv_cache_miss_duration_per_model{labels}") == s["miss_ns"] // 1000
    assert metric_value(page, f"nv_inference_request_success{labels}") == s["success"]
    assert metric_value(page, f"nv_inference_count{labels}") == s["inference_count"]
    assert (
        metric_value(page, f"nv_inference_request_duration_us{labels}") == s["success_ns"] // 1000
    )
    # The cache's own gauges: every lookup is a hit or a miss of some model here.
    lookups = metric_value(page, "nv_cache_num_lookups")
    assert lookups == s["hit"] + s["miss"]
    assert metric_value(page, "nv_cache_num_hits") == s["hit"]
    assert metric_value(page, "nv_cache_num_entries") == s["miss"]  # nothing evicted
    assert metric_value(page, "nv_cache_num_evictions") == 0
    assert 0 < metric_value(page, "nv_cache_util") < 1
    # A model without response_cache has no per-model cache series.
    assert 'nv_cache_num_hits_per_model{model="add_sub"' not in page


def test_shm_outputs_bypass_and_shm_inputs_hit(server, client):
    client.unregister_system_shared_memory()
    with Region("cache_out", 128) as out, Region("cache_in", 64) as inp:
        client.register_system_shared_memory(out.name, out.key, 128)
        client.register_system_shared_memory(inp.name, inp.key, 64)
        tensors, total, _ = inputs(700.0)
        client.infer(MODEL, tensors)  # the entry, in-band
        lookups = metric_value(metrics(server), "nv_cache_num_lookups")
        before = counts(server)
        wanted = [
            httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")
        ]
        wanted[0].set_shared_memory(out.name, 64)
        wanted[1].set_shared_memory(out.name, 64, offset=64)
        for _ in range(2):
            client.infer(MODEL, inputs(700.0)[0], outputs=wanted)
            np.testing.assert_array_equal(out.read(np.float32, [1, 16]), total)
        # Not looked up, not kept: the model ran both times.
        assert counts(server) == tuple(x + d for x, d in zip(before, (2, 2, 2, 0, 0)))
        assert metric_value(metrics(server), "nv_cache_num_lookups") == lookups
        # An input in a region is keyed by its bytes: the in-band entry answers it.
        a = (np.arange(16, dtype=np.float32) + 700.0).reshape(1, 16)
        inp.write([a])
        in_shm = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        in_shm.set_shared_memory(inp.name, 64)
        reply = client.infer(MODEL, [in_shm, inputs(700.0)[0][1]])
        np.testing.assert_array_equal(reply.as_numpy("OUTPUT0"), total)
        assert counts(server)[3] == before[3] + 1
        client.unregister_system_shared_memory()


def test_decoupled_model_with_cache_does_not_load(server):
    index = requests.post(f"{server.url}/v2/repository/index", timeout=TIMEOUT).json()
    entry = next(e for e in index if e["name"] == "repeat_cache")
    assert entry.get("state") == "UNAVAILABLE"
    assert entry["reason"] == (
        "Response Cache does not currently support model repeat_cache with 'decoupled' "
        "transaction policy. Please disable the response cache."
    )


def test_reload_drops_the_models_entries(server, client):
    client.infer(MODEL, inputs(800.0)[0])
    client.infer(MODEL, inputs(800.0)[0])
    assert stats(server)["hit"] >= 1
    entries = metric_value(metrics(server), "nv_cache_num_entries")
    client.unload_model(MODEL)
    client.load_model(MODEL)
    assert metric_value(metrics(server), "nv_cache_num_entries") == 0 < entries
    # The reloaded version starts its statistics again and computes the answer again
    # (Triton 2.51 keeps the entries and answers from them: its cache outlives a reload).
    tensors, total, _ = inputs(800.0)
    np.testing.assert_array_equal(client.infer(MODEL, tensors).as_numpy("OUTPUT0"), total)
    assert counts(server) == (1, 1, 1, 0, 1)


def test_lru_eviction_by_bytes(tmp_path):
    """A cache with room for one add_sub entry (each costs some 700 bytes): the least
    recently used goes; one larger than the cache is never kept (and still a miss)."""
    repository = _add_sub_cache(tmp_path / "repo")
    extra = ["--response-cache-byte-size", "1000"]  # Triton's deprecated spelling
    with NaiadServer(repository, log_dir=tmp_path, extra_args=extra) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        for base in (1.0, 2.0, 1.0, 1.0):
            client.infer(MODEL, inputs(base)[0])
        page = metrics(server)
        # 1 miss, 2 miss (evicts 1), 1 miss (evicts 2), 1 hit.
        assert counts(server) == (3, 3, 4, 1, 3)
        assert metric_value(page, "nv_cache_num_evictions") == 2
        assert metric_value(page, "nv_cache_num_entries") == 1
        assert 0.5 < metric_value(page, "nv_cache_util") <= 1
        client.close()
    with NaiadServer(
        repository, log_dir=tmp_path, extra_args=["--cache-config=local,size=100"]
    ) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        for _ in range(2):
            client.infer(MODEL, inputs(1.0)[0])
        assert counts(server) == (2, 2, 2, 0, 2)
        assert metric_value(metrics(server), "nv_cache_num_entries") == 0
        client.close()


def test_without_cache_config_nothing_is_cached(tmp_path):
    """As Triton: the model loads, runs every request, and reports zero cache counters;
    the cache's own gauges are absent."""
    repository = _add_sub_cache(tmp_path / "repo")
    with NaiadServer(repository, log_dir=tmp_path) as server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        for _ in range(2):
            client.infer(MODEL, inputs(1.0)[0])
        assert counts(server) == (2, 2, 2, 0, 0)
        page = metrics(server)
        assert f'nv_cache_num_hits_per_model{{model="{MODEL}",version="1"}} 0' in page
        assert "nv_cache_util" not in page
        client.close()


def test_cache_flags_as_tritonserver_reads_them():
    from naiad.flags.cache_config import CacheConfigError, LocalCacheSettings, cache_settings

    assert cache_settings([], None) is None
    assert cache_settings(["local,size=1048576"], None) == LocalCacheSettings(1048576)
    assert cache_settings([], 4096) == LocalCacheSettings(4096)
    failures = {
        (("local",), None): "No cache specified. --cache-config option format is "
        "<cache name>,<setting>=<value>. Got local",
        (("local,size",), None): "--cache-config option format is '<cache name>,"
        "<setting>=<value>'. Got local,size",
        (("local,other=1",), None): "Failed to initialize LocalCache: config didn't contain "
        "a valid 'size' field.",
        (("local,size=1",), 5): "Error: Incompatible flags --response-cache-byte-size and "
        "--cache-config both provided. Please provide one or the other.",
        (("other,size=1",), None): "unable to find 'libtritoncache_other.so' for cache: "
        "Naiad has the 'local' and 'redis' caches",
    }
    for (configs, byte_size), message in failures.items():
        with pytest.raises(CacheConfigError) as raised:
            cache_settings(list(configs), byte_size)
        assert str(raised.value) == message


def _json_request(port: int, base: float) -> bytes:
    body = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [1, 16],
                    "data": [base + i for i in range(16)],
                },
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
            ]
        }
    ).encode()
    head = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _read_answers(sock: socket.socket, count: int) -> list[dict]:
    """`count` Content-Length framed responses from `sock`, in order: their JSON bodies."""
    buffer = b""
    answers = []
    while len(answers) < count:
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            buffer += chunk
            continue
        head = buffer[:end].decode("latin-1").lower()
        assert head.startswith("http/1.1 200"), head
        length = int(head.split("content-length:")[1].split("\r\n")[0])
        while len(buffer) < end + 4 + length:
            buffer += sock.recv(65536)
        answers.append(json.loads(buffer[end + 4 : end + 4 + length]))
        buffer = buffer[end + 4 + length :]
    return answers


def test_pipelined_hits_wait_behind_misses_in_order(server):
    """Hits sent behind misses on one connection, in one write, come back after them, in
    request order, with their own outputs."""
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=TIMEOUT) as sock:
        sock.sendall(_json_request(server.http_port, 300.0))  # now cached
        _read_answers(sock, 1)
        before = counts(server)
        bases = (301.0, 300.0, 302.0, 300.0, 300.0)  # miss, hit, miss, hit, hit
        sock.sendall(b"".join(_json_request(server.http_port, base) for base in bases))
        answers = _read_answers(sock, len(bases))
    for base, answer in zip(bases, answers):
        outputs = {o["name"]: o["data"] for o in answer["outputs"]}
        assert outputs["OUTPUT0"] == [base + i + 2.0 for i in range(16)]
        assert outputs["OUTPUT1"] == [base + i - 2.0 for i in range(16)]
    after = counts(server)
    # (inferences, successes, hits, misses): the misses ran, the hits did not.
    assert [after[i] - before[i] for i in (0, 2, 3, 4)] == [2, 5, 3, 2]
