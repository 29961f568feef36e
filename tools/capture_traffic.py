"""Record what real clients send to a server, as seeds for the fuzz targets (tests/fuzz/).

    .venv/bin/python tools/capture_traffic.py [--out tests/fuzz/corpus]

Starts `naiad serve` on model_repository/ (add_sub, identity_bytes), puts a loopback
proxy in front of its HTTP and gRPC ports that records every connection's client bytes,
and runs the clients at the proxy: tritonclient.http and .grpc (binary and JSON tensors,
BYTES, requested outputs, parameters), curl (JSON bodies, a chunked body, a bad one) and
perf_analyzer (HTTP and gRPC; `source /work/shared/peers/env.sh` finds it, skipped when
it is not there). It writes, one file per connection or body, named by client:

  <out>/http/    the client's bytes of an HTTP/1.1 connection (fuzz_http)
  <out>/kserve/  each infer request's body (fuzz_kserve)
  <out>/grpc/    the client's bytes of an HTTP/2 connection (fuzz_grpc)

A connection is cut at 16 KiB (perf_analyzer's run a few requests, not thousands) and
identical files are kept once, so the corpus stays small.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from server_harness import EXAMPLE_MODELS, NaiadServer, make_repository  # noqa: E402

MAX_CONNECTION_BYTES = 16384
PEERS_ENV = Path("/work/shared/peers/env.sh")


class RecordingProxy:
    """Listens on 127.0.0.1, forwards each connection to `upstream`, and keeps the first
    MAX_CONNECTION_BYTES the client sent on it (`connections`, with `label` at the time)."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.label = "client"
        self.connections: list[tuple[str, bytearray]] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            recorded = bytearray()
            with self._lock:
                self.connections.append((self.label, recorded))
            threading.Thread(
                target=self._pump, args=(client, server, recorded), daemon=True
            ).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, recorded: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if recorded is not None and len(recorded) < MAX_CONNECTION_BYTES:
                    recorded += data[: MAX_CONNECTION_BYTES - len(recorded)]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


def infer_bodies(stream: bytes) -> list[bytes]:
    """The bodies of the Content-Length infer requests in an HTTP/1.1 client stream."""
    bodies = []
    pos = 0
    while (end := stream.find(b"\r\n\r\n", pos)) != -1:
        head = stream[pos:end].decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        body = stream[end + 4 : end + 4 + length]
        if head[0].startswith("POST") and "/infer" in head[0] and len(body) == length:
            bodies.append(body)
        pos = end + 4 + length
    return bodies


def run_tritonclient_http(url: str) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    for binary in (True, False):
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(a, binary_data=binary)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        client.infer("add_sub", inputs, outputs=outputs, request_id="req-1")
        client.infer("add_sub", inputs, model_version="1", priority=1, timeout=100000)
    strings = np.array([[b"hello", b"", "é".encode()]], dtype=np.object_)
    for binary in (True, False):
        i = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        i.set_data_from_numpy(strings, binary_data=binary)
        client.infer("identity_bytes", [i])
    client.close()


def run_tritonclient_grpc(url: str) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a)
    client.infer("add_sub", inputs, request_id="g-1", priority=2)
    client.infer("add_sub", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    i = grpcclient.InferInput("INPUT0", [1, 2], "BYTES")
    i.set_data_from_numpy(np.array([[b"ab", b"c"]], dtype=np.object_))
    client.infer("identity_bytes", [i])
    client.close()


def run_curl(url: str) -> None:
    infer = f"http://{url}/v2/models/add_sub/infer"
    body = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.5] * 16},
                {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2] * 16},
            ]
        }
    )
    for extra in ([], ["-H", "Transfer-Encoding: chunked"]):
        subprocess.run(["curl", "-s", "-o", "/dev/null", *extra, "-d", body, infer], check=True)
    subprocess.run(["curl", "-s", "-o", "/dev/null", "-d", '{"inputs":[', infer], check=True)
    subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://{url}/v2/models/add_sub"], check=True)


def run_perf_analyzer(http_url: str, grpc_url: str) -> None:
    if not PEERS_ENV.exists():
        print("perf_analyzer: not installed here, skipped")
        return
    for protocol, url in (("http", http_url), ("grpc", grpc_url)):
        for shape_args in ("", "--input-data zero"):
            command = (
                f"source {PEERS_ENV} && perf_analyzer -m add_sub -u {url} -i {protocol} "
                f"{shape_args} --measurement-mode count_windows "
                "--measurement-request-count 20 --max-trials 1 -p 200"
            )
            subprocess.run(["bash", "-c", command], check=False, capture_output=True)
    command = (
        f"source {PEERS_ENV} && perf_analyzer -m identity_bytes -u {http_url} --shape INPUT0:3 "
        "--measurement-mode count_windows --measurement-request-count 20 --max-trials 1 -p 200"
    )
    subprocess.run(["bash", "-c", command], check=False, capture_output=True)


def write(folder: Path, label: str, data: bytes, seen: set[str]) -> None:
    digest = hashlib.sha1(data).hexdigest()
    if not data or digest in seen:
        return
    seen.add(digest)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{label}-{digest[:12]}").write_bytes(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fuzz" / "corpus")
    args = parser.parse_args()
    work = Path("build/capture")
    shutil.rmtree(work, ignore_errors=True)
    repository = make_repository(
        work / "models",
        {name: EXAMPLE_MODELS / name for name in ("add_sub", "identity_bytes")},
    )
    with NaiadServer(repository, log_dir=work) as server:
        http = RecordingProxy(server.http_port)
        grpc = RecordingProxy(server.grpc_port)
        http_url, grpc_url = f"127.0.0.1:{http.port}", f"127.0.0.1:{grpc.port}"
        for label, run in (
            (
                "tritonclient",
                lambda: (run_tritonclient_http(http_url), run_tritonclient_grpc(grpc_url)),
            ),
            ("curl", lambda: run_curl(http_url)),
            ("perf_analyzer", lambda: run_perf_analyzer(http_url, grpc_url)),
        ):
            http.label = grpc.label = label
            run()
        http.close()
        grpc.close()
    seen: set[str] = set()
    for label, stream in http.connections:
        write(args.out / "http", label, bytes(stream), seen)
        for body in infer_bodies(bytes(stream)):
            write(args.out / "kserve", label, body, seen)
    for label, stream in grpc.connections:
        write(args.out / "grpc", label, bytes(stream), seen)
    for folder in ("http", "kserve", "grpc"):
        files = list((args.out / folder).glob("*"))
        print(f"{folder}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
