"""One load generator of perf/soak.py: a closed loop of add_sub requests of one kind against a
server, each answer checked against numpy, until SIGTERM. Prints one JSON line of counts at the
end: sent, ok, errors (an error answer), wrong (a wrong answer), lost (no answer in time).

Kinds: `http_binary` and `http_json` (a raw keep-alive socket: the bodies perf/wrk_load.py
builds), `grpc` (tritonclient.grpc), `http_shm` and `grpc_shm` (tritonclient with the inputs
and outputs in a system shared-memory region of this process's own).

    python perf/soak_load.py KIND --http-port P --grpc-port Q [--model add_sub]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time

import numpy as np
from wrk_load import add_sub_body, add_sub_inputs

KINDS = ("http_binary", "http_json", "grpc", "http_shm", "grpc_shm")
ANSWER_TIMEOUT_S = 30.0

_stop = False


def _on_term(signum, frame) -> None:
    global _stop
    _stop = True


class Counts:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.sent = self.ok = self.errors = self.wrong = self.lost = 0
        self.first_problem = ""

    def problem(self, field: str, text: str) -> None:
        setattr(self, field, getattr(self, field) + 1)
        if not self.first_problem:
            self.first_problem = f"{field}: {text[:300]}"

    def as_json(self) -> str:
        return json.dumps(self.__dict__)


def _expected() -> tuple[np.ndarray, np.ndarray]:
    inputs = add_sub_inputs()
    a, b = inputs["INPUT0"], inputs["INPUT1"]
    return a + b, a - b


class RawHttp:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, port: int, path: str, body: bytes, headers: dict[str, str]) -> None:
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S)
        self.buffer = b""

    def _read_until(self, marker: bytes) -> int:
        while (at := self.buffer.find(marker)) < 0:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buffer += chunk
        return at

    def exchange(self) -> tuple[int, dict[str, str], bytes]:
        self.sock.sendall(self.request)
        end = self._read_until(b"\r\n\r\n")
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        start = end + 4
        while len(self.buffer) < start + length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection mid-body")
            self.buffer += chunk
        body = self.buffer[start : start + length]
        self.buffer = self.buffer[start + length :]
        return status, headers, body


def _check_outputs(counts: Counts, got: dict[str, np.ndarray]) -> None:
    want0, want1 = _expected()
    if np.allclose(got.get("OUTPUT0"), want0) and np.allclose(got.get("OUTPUT1"), want1):
        counts.ok += 1
    else:
        counts.problem("wrong", f"outputs {got}")


def _http_loop(kind: str, args, counts: Counts) -> None:
    body, headers = add_sub_body("binary" if kind == "http_binary" else "json")
    conn = RawHttp(args.http_port, f"/v2/models/{args.model}/infer", body, headers)
    while not _stop:
        counts.sent += 1
        try:
            status, head, payload = conn.exchange()
        except TimeoutError:
            counts.problem("lost", "no answer within the timeout")
            return
        if status != 200:
            counts.problem("errors", f"{status} {payload[:200]!r}")
            continue
        if kind == "http_binary":
            header_len = int(head["inference-header-content-length"])
            meta = json.loads(payload[:header_len])
            got, at = {}, header_len
            for out in meta["outputs"]:
                size = out["parameters"]["binary_data_size"]
                got[out["name"]] = np.frombuffer(payload[at : at + size], np.float32)
                at += size
        else:
            meta = json.loads(payload)
            got = {o["name"]: np.asarray(o["data"], np.float32) for o in meta["outputs"]}
        _check_outputs(counts, {k: v.reshape(1, 16) for k, v in got.items()})


def _tritonclient_loop(kind: str, args, counts: Counts) -> None:
    grpc = kind.startswith("grpc")
    if grpc:
        import tritonclient.grpc as client_lib

        client = client_lib.InferenceServerClient(f"127.0.0.1:{args.grpc_port}")
    else:
        import tritonclient.http as client_lib

        client = client_lib.InferenceServerClient(f"127.0.0.1:{args.http_port}")
    inputs = add_sub_inputs()
    region = None
    if kind.endswith("_shm"):
        import tritonclient.utils.shared_memory as shm

        name = f"soak_{kind}_{os.getpid()}"
        nbytes = 16 * 4
        region = shm.create_shared_memory_region(name, f"/{name}", 4 * nbytes)
        shm.set_shared_memory_region(region, [inputs["INPUT0"], inputs["INPUT1"]])
        client.register_system_shared_memory(name, f"/{name}", 4 * nbytes)
    try:
        while not _stop:
            infer_inputs, outputs = [], []
            for index, (input_name, array) in enumerate(inputs.items()):
                tensor = client_lib.InferInput(input_name, list(array.shape), "FP32")
                if region is None:
                    tensor.set_data_from_numpy(array)
                else:
                    tensor.set_shared_memory(name, nbytes, offset=index * nbytes)
                infer_inputs.append(tensor)
            for index, output_name in enumerate(("OUTPUT0", "OUTPUT1")):
                out = client_lib.InferRequestedOutput(output_name)
                if region is not None:
                    out.set_shared_memory(name, nbytes, offset=(2 + index) * nbytes)
                outputs.append(out)
            counts.sent += 1
            try:
                result = client.infer(
                    args.model, infer_inputs, outputs=outputs, timeout=int(ANSWER_TIMEOUT_S)
                )
            except Exception as exc:  # an error answer or a transport failure
                text = str(exc)
                field = (
                    "lost" if "timeout" in text.lower() or "deadline" in text.lower() else "errors"
                )
                counts.problem(field, text)
                continue
            if region is None:
                got = {n: result.as_numpy(n) for n in ("OUTPUT0", "OUTPUT1")}
            else:
                got = {
                    n: shm.get_contents_as_numpy(
                        region, np.float32, [1, 16], offset=(2 + i) * nbytes
                    )
                    for i, n in enumerate(("OUTPUT0", "OUTPUT1"))
                }
            _check_outputs(counts, got)
    finally:
        if region is not None:
            try:
                client.unregister_system_shared_memory(name)
            finally:
                shm.destroy_shared_memory_region(region)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--model", default="add_sub")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _on_term)
    counts = Counts(args.kind)
    started = time.monotonic()
    try:
        if args.kind.startswith("http_") and not args.kind.endswith("_shm"):
            _http_loop(args.kind, args, counts)
        else:
            _tritonclient_loop(args.kind, args, counts)
    except Exception as exc:  # the loop itself broke: report it, never hide it
        counts.problem("errors", f"load generator stopped: {exc!r}")
    counts.seconds = round(time.monotonic() - started, 2)
    print(counts.as_json(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
