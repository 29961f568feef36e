"""A black-box smoke run of the real server with the core built under a sanitizer.

    .venv/bin/python tests/sanitize/smoke_server.py asan|tsan CORE_SO

`make test-server-sanitize` builds naiad._core with ASan/UBSan and with TSan
(build/sanitize/<name>/) and runs this for each. It overlays the sanitized extension on
the package (a tree of links to pysrc/naiad with that _core in place), starts
`naiad serve` on add_sub and identity_bytes with the sanitizer's runtime preloaded
(CPython itself is not instrumented: no leak check; TSan with tests/sanitize/tsan.supp),
and drives it as users do: tritonclient HTTP (binary and JSON tensors, the fast lane and
the general path: a chunked body, BYTES), gRPC (raw contents, and a compressed request
the I/O loop inflates), system shared memory, a model reload (explicit model control),
then a SIGTERM. Every process's reports go to build/sanitize/<name>/report.*: the run
fails if there is any, or if a request failed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

from server_harness import EXAMPLE_MODELS, NaiadServer, descendants, make_repository  # noqa: E402
from shm_support import Region  # noqa: E402

ROUNDS = 60  # each round: 5 HTTP, 2 gRPC, 1 shm request


def runtime(name: str) -> str:
    lib = "libasan.so" if name == "asan" else "libtsan.so"
    path = subprocess.run(
        ["gcc", f"-print-file-name={lib}"], capture_output=True, text=True
    ).stdout.strip()
    if not Path(path).is_absolute():
        raise SystemExit(f"gcc has no {lib}")
    return path


def overlay(core_so: Path, dest: Path) -> Path:
    """A package tree: links to every entry of pysrc/naiad but _core, which is `core_so`."""
    package = dest / "site" / "naiad"
    shutil.rmtree(dest / "site", ignore_errors=True)
    package.mkdir(parents=True)
    for entry in (REPO / "pysrc" / "naiad").iterdir():
        if not entry.name.startswith("_core."):
            (package / entry.name).symlink_to(entry)
    (package / core_so.name).symlink_to(core_so.resolve())
    return dest / "site"


def sanitizer_env(name: str, work: Path) -> dict[str, str]:
    reports = f"log_path={work / 'report'}"
    env = {"LD_PRELOAD": runtime(name), "PYTHONMALLOC": "malloc"}
    if name == "asan":
        env["ASAN_OPTIONS"] = (
            f"{reports}:detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"
        )
        env["UBSAN_OPTIONS"] = f"{reports}:print_stacktrace=1:halt_on_error=1"
    else:
        env["TSAN_OPTIONS"] = (
            f"{reports}:suppressions={HERE / 'tsan.supp'}:halt_on_error=0:report_signal_unsafe=0"
        )
    return env


def http_rounds(url: str) -> int:
    client = httpclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    strings = np.array([[b"one", b"", b"three"]], dtype=np.object_)
    sent = 0
    for r in range(ROUNDS):
        for binary in (True, False):
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for i in inputs:
                i.set_data_from_numpy(a + r, binary_data=binary)
            outputs = [
                httpclient.InferRequestedOutput(o, binary_data=binary)
                for o in ("OUTPUT0", "OUTPUT1")
            ]
            result = client.infer("add_sub", inputs, outputs=outputs)
            assert np.array_equal(result.as_numpy("OUTPUT0"), 2 * (a + r)), "add_sub answered wrong"
            sent += 1
        i = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        i.set_data_from_numpy(strings)
        assert client.infer("identity_bytes", [i]).as_numpy("OUTPUT0").tolist() == strings.tolist()
        sent += 1
        sent += raw_chunked(url, r) + raw_bad(url)
    client.close()
    return sent


def raw_chunked(url: str, r: int) -> int:
    """A JSON request with a chunked body: the fast lane leaves it to the general path."""
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [r] * 16},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1] * 16},
            ]
        }
    )
    half = len(body) // 2
    chunks = f"{half:x}\r\n{body[:half]}\r\n{len(body) - half:x}\r\n{body[half:]}\r\n0\r\n\r\n"
    request = (
        "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunks
    )
    assert exchange(url, request.encode()).startswith(b"HTTP/1.1 200"), "chunked request failed"
    return 1


def raw_bad(url: str) -> int:
    """A refused request (wrong datatype): the validator's 400 on the fast lane."""
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT8", "shape": [1, 16], "data": [1] * 16}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    request = (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
        % len(body)
    )
    reply = exchange(url, request + body)
    assert reply.startswith(b"HTTP/1.1 400"), f"a bad request was not refused: {reply[:300]!r}"
    return 1


def exchange(url: str, data: bytes) -> bytes:
    host, port = url.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        out = b""
        while b"\r\n\r\n" not in out or len(out) < out.index(b"\r\n\r\n") + 4 + content_length(out):
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def content_length(out: bytes) -> int:
    for line in out.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def grpc_rounds(url: str) -> int:
    client = grpcclient.InferenceServerClient(url)
    a = np.ones((1, 16), dtype=np.float32)
    for r in range(ROUNDS):
        inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(a * r)
        assert np.array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT1"), 0 * a)
        compressed = client.infer("add_sub", inputs, compression_algorithm="gzip")
        assert np.array_equal(compressed.as_numpy("OUTPUT0"), 2 * a * r)
    client.close()
    return 2 * ROUNDS


def shm_rounds(url: str) -> int:
    client = httpclient.InferenceServerClient(url)
    size = 64
    regions = [Region("san", 2 * size), Region("san_out", 2 * size)]
    try:
        client.register_system_shared_memory(regions[0].name, regions[0].key, 2 * size)
        client.register_system_shared_memory(regions[1].name, regions[1].key, 2 * size)
        for r in range(ROUNDS):
            a = np.full((1, 16), r, dtype=np.float32)
            regions[0].write([a, a])
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for k, i in enumerate(inputs):
                i.set_shared_memory(regions[0].name, size, offset=k * size)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
            outputs[0].set_shared_memory(regions[1].name, size)
            client.infer("add_sub", inputs, outputs=outputs)
            assert np.array_equal(regions[1].read(np.float32, [1, 16]), 2 * a), "shm output wrong"
        client.unregister_system_shared_memory()
    finally:
        for region in regions:
            region.destroy()
        client.close()
    return ROUNDS


def main() -> None:
    name, core_so = sys.argv[1], Path(sys.argv[2])
    work = REPO / "build" / "sanitize" / name
    for old in work.glob("report*"):
        old.unlink()
    site = overlay(core_so, work)
    shutil.rmtree(work / "models", ignore_errors=True)
    repository = make_repository(
        work / "models", {model: EXAMPLE_MODELS / model for model in ("add_sub", "identity_bytes")}
    )
    os.environ.update(sanitizer_env(name, work))
    os.environ["PYTHONPATH"] = str(site)
    args = [
        "--model-control-mode",
        "explicit",
        "--load-model",
        "add_sub",
        "--load-model",
        "identity_bytes",
    ]
    with NaiadServer(repository, log_dir=work, extra_args=args) as server:
        # The server and its workers run the sanitized core, under the sanitizer's runtime.
        for pid in (server.pid, *descendants(server.pid)):
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert str(core_so.resolve()) in maps and Path(runtime(name)).name in maps, pid
        for var in ("LD_PRELOAD", "PYTHONPATH"):
            os.environ.pop(var)  # the clients below and their tools run as usual
        http_url, grpc_url = f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}"
        sent = http_rounds(http_url) + grpc_rounds(grpc_url) + shm_rounds(http_url)
        client = httpclient.InferenceServerClient(http_url)
        client.load_model("add_sub")  # a reload: a new version of the model's instances
        assert client.is_model_ready("add_sub")
        sent += http_rounds(http_url)
        client.close()
        loaded = server.stderr_text()
    code = server.returncode
    reports = sorted(work.glob("report*"))
    for report in reports:
        print(f"--- {report}\n{report.read_text()[:6000]}")
    print(f"{name}: {sent} requests answered, server exit {code}, {len(reports)} sanitizer reports")
    if reports or code != 0 or "Traceback" in loaded:
        if "Traceback" in loaded:
            print(loaded[-4000:])
        raise SystemExit(1)


if __name__ == "__main__":
    main()
