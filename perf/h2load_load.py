"""h2load as a light gRPC client: one serialized KServe `ModelInferRequest` (raw input
contents) in a gRPC message, posted over and over to `inference.GRPCInferenceService/
ModelInfer` by `h2load` (Debian's nghttp2-client) pinned to given CPUs. Used by perf/bench.py's
h2load scenarios (gRPC server capacity side by side with Triton, as the wrk scenarios for HTTP).

h2load counts an answer with HTTP status 2xx as a success, but a gRPC error is a 200 too (its
grpc-status is in the trailers). So every run is bracketed by a check of the same request
sent through grpcio (`check_answer`: grpc-status OK, outputs equal to the numpy reference),
and the bytes h2load received per answer must cover the outputs' bytes (an error answer
carries none).

The request and response messages are written and read here by hand (protobuf's wire format,
fields of grpc_service.proto), so the harness needs no generated code.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import numpy as np

METHOD = "/inference.GRPCInferenceService/ModelInfer"
_DTYPES = {"FP32": np.float32, "FP16": np.float16, "INT32": np.int32, "INT64": np.int64}


# ---------------------------------------------------------------------------- protobuf wire


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, messages, packed scalars."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes):
    """(field number, value) of each field: an int for varints, bytes for length-delimited."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"protobuf wire type {wire} (field {number}) is not read here")
        yield number, value


# ---------------------------------------------------------------------------- messages


def infer_request(model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> bytes:
    """A serialized ModelInferRequest: model_name (1), inputs (5: name 1, datatype 2,
    shape 3 packed), outputs (6: name 1) and raw_input_contents (7), in input order."""
    message = _field(1, model.encode())
    for name, array in inputs.items():
        datatype = next(k for k, v in _DTYPES.items() if np.dtype(v) == array.dtype)
        shape = b"".join(_varint(d) for d in array.shape)
        message += _field(
            5, _field(1, name.encode()) + _field(2, datatype.encode()) + _field(3, shape)
        )
    for name in outputs:
        message += _field(6, _field(1, name.encode()))
    for array in inputs.values():
        message += _field(7, np.ascontiguousarray(array).tobytes())
    return message


def grpc_message(payload: bytes) -> bytes:
    """The gRPC length-prefixed message: not compressed (0), then the length, big-endian."""
    return struct.pack(">BI", 0, len(payload)) + payload


def infer_response_outputs(payload: bytes) -> dict[str, np.ndarray]:
    """The outputs of a serialized ModelInferResponse: outputs (5: name 1, datatype 2,
    shape 3) paired in order with raw_output_contents (6)."""
    described, raw = [], []
    for number, value in _fields(payload):
        if number == 5:
            name, datatype, shape = "", "", []
            for sub, item in _fields(value):
                if sub == 1:
                    name = item.decode()
                elif sub == 2:
                    datatype = item.decode()
                elif sub == 3:  # packed int64 (a lone unpacked one arrives as an int)
                    if isinstance(item, int):
                        shape.append(item)
                    else:
                        pos = 0
                        while pos < len(item):
                            dim, pos = _read_varint(item, pos)
                            shape.append(dim)
            described.append((name, datatype, shape))
        elif number == 6:
            raw.append(value)
    if len(raw) != len(described):
        raise ValueError(f"{len(described)} outputs described, {len(raw)} raw contents")
    return {
        name: np.frombuffer(data, dtype=_DTYPES[datatype]).reshape(shape)
        for (name, datatype, shape), data in zip(described, raw)
    }


# ---------------------------------------------------------------------------- answers


def check_answer(
    url: str, model: str, inputs: dict[str, np.ndarray], expected: dict, root_cert: bytes = b""
) -> str | None:
    """Sends the request h2load sends through grpcio (over TLS trusting `root_cert` when
    given); None when it is answered with grpc-status OK and outputs equal to `expected`,
    else what was wrong."""
    import grpc  # perf/.tools/venv has it (setup_tools.sh)

    request = infer_request(model, inputs, list(expected))
    if root_cert:
        credentials = grpc.ssl_channel_credentials(root_certificates=root_cert)
        channel = grpc.secure_channel(url, credentials)
    else:
        channel = grpc.insecure_channel(url)
    with channel:
        call = channel.unary_unary(METHOD)  # no serializers: bytes in, bytes out
        try:
            answer = call(request, timeout=30)
        except grpc.RpcError as exc:
            return f"gRPC {exc.code().name}: {exc.details()}"
    try:
        got = infer_response_outputs(answer)
    except (ValueError, KeyError) as exc:
        return f"unreadable ModelInferResponse: {exc}"
    for name, want in expected.items():
        if name not in got:
            return f"output {name} missing (got {sorted(got)})"
        if got[name].size != want.size or not np.allclose(got[name].ravel(), want.ravel()):
            return f"output {name} differs from the reference"
    return None


# ---------------------------------------------------------------------------- load


def h2load_path() -> str:
    found = shutil.which("h2load")
    if not found:
        raise SystemExit("h2load is not installed: run perf/setup_tools.sh (Debian nghttp2-client)")
    return found


def run_h2load(
    url: str,
    request: bytes,
    connections: int,
    seconds: float,
    cpus: list[int] | None = None,
    streams: int = 1,
    requests: int = 0,
    scheme: str = "http",
    headers: tuple[str, ...] = (),
) -> dict:
    """One h2load run posting `request` (a serialized ModelInferRequest) to gRPC `url` over
    `connections` HTTP/2 connections, `streams` requests in flight on each, for `seconds`
    (after a 1 s warm-up), or until `requests` were answered (then `seconds` only bounds
    the wait); `scheme` "https": over TLS (ALPN h2); `headers`: more ("name: value"): {"rps", "requests", "succeeded",
    "failed", "data_bytes", "avg_us", "output"}."""
    with tempfile.TemporaryDirectory(prefix="naiad-h2load-") as tmp:
        body = Path(tmp) / "body"
        body.write_bytes(grpc_message(request))
        cmd = [
            h2load_path(),
            "-t1",
            f"-c{connections}",
            f"-m{streams}",
            *(
                [f"-n{requests}"]
                if requests
                else [f"-D{max(1, round(seconds))}", "--warm-up-time=1"]
            ),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            *(arg for header in headers for arg in ("-H", header)),
            f"--data={body}",
            f"{scheme}://{url}{METHOD}",
        ]
        if cpus:
            cmd = ["taskset", "-c", ",".join(map(str, cpus)), *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"h2load failed ({proc.returncode}): {out.strip()[-500:]}")
    rps = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out)
    counts = re.search(
        r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out
    )
    data = re.search(r"\((\d+)\) data", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)\b", out)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "requests": int(counts.group(2)) if counts else 0,
        "succeeded": int(counts.group(3)) if counts else 0,
        "failed": int(counts.group(4)) if counts else 0,
        "data_bytes": int(data.group(1)) if data else 0,
        "avg_us": float(mean.group(1)) * {"us": 1.0, "ms": 1e3, "s": 1e6}[mean.group(2)]
        if mean
        else 0.0,
        "output": out,
    }
