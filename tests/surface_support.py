"""What the HTTP-surface tests share (tests/test_http_surface*.py): the model
repository, raw HTTP/1.1 exchanges (to see headers and bytes as sent) and the cases."""

from __future__ import annotations

import json
import socket
from pathlib import Path

SURFACE_MODELS = Path(__file__).parent / "surface_models"


def exchange(url: str, request: bytes, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """Sends one raw HTTP/1.1 request; (status, {lower-cased header: value}, body)."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        status_line, headers, body, _ = read_answer(sock)
    return int(status_line.split()[1]), headers, body


def read_answer(sock: socket.socket, data: bytes = b"") -> tuple[str, dict, bytes, bytes]:
    """One answer read from `data`, then the socket: (status line, {lower-cased header:
    value}, body, what came after it). Pipelined requests' answers may arrive in one
    read: this one ends at its length."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return lines[0], headers, body[:length], body[length:]


def infer_request(model: str, doc: dict, headers: str = "") -> bytes:
    body = json.dumps(doc).encode()
    return (
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: x\r\n{headers}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def tensor(name: str, datatype: str, shape: list, data: list) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def classified(output: str, count: int, binary: bool = False) -> dict:
    parameters = {"classification": count}
    if binary:
        parameters["binary_data"] = True
    return {"name": output, "parameters": parameters}


FP32_ROWS = [0.5, 2.25, -1, 2.25, 7, 0.1, 1, 2, 3, 4, 5, 6]

# (name, model, request document): classification as Triton 2.51 answers it. Not here:
# BYTES outputs and empty items, which crash Triton 2.51 (README, Differences).
CLASSIFICATION_CASES = [
    (
        "batched, labels",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [2, 6], FP32_ROWS)],
            "outputs": [classified("OUT_FP32", 3)],
        },
    ),
    (
        "count past the classes",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 6], FP32_ROWS[:6])],
            "outputs": [classified("OUT_FP32", 10)],
        },
    ),
    (
        "binary",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 6], FP32_ROWS[:6])],
            "outputs": [classified("OUT_FP32", 2, True)],
        },
    ),
    (
        "ties",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 20], [1.0] * 20)],
            "outputs": [classified("OUT_FP32", 20)],
        },
    ),
    (
        "int32 with labels",
        "classes",
        {
            "inputs": [tensor("IN_INT32", "INT32", [1, 4], [3, -7, 3, 100])],
            "outputs": [classified("OUT_INT32", 4)],
        },
    ),
    (
        "uint8",
        "classes",
        {
            "inputs": [tensor("IN_UINT8", "UINT8", [1, 3], [3, 200, 1])],
            "outputs": [classified("OUT_UINT8", 2)],
        },
    ),
    (
        "fp64",
        "classes",
        {
            "inputs": [tensor("IN_FP64", "FP64", [1, 3], [1e20, 1e-7, -3.5])],
            "outputs": [classified("OUT_FP64", 3)],
        },
    ),
    (
        "int64",
        "classes",
        {
            "inputs": [tensor("IN_INT64", "INT64", [1, 3], [-5, 9, 2])],
            "outputs": [classified("OUT_INT64", 1)],
        },
    ),
    (
        "bool refused",
        "classes",
        {
            "inputs": [tensor("IN_BOOL", "BOOL", [1, 3], [True, False, True])],
            "outputs": [classified("OUT_BOOL", 2)],
        },
    ),
    (
        "zero is no classification",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 2], [1, 2])],
            "outputs": [classified("OUT_FP32", 0)],
        },
    ),
    (
        "negative",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 2], [1, 2])],
            "outputs": [classified("OUT_FP32", -1)],
        },
    ),
    (
        "not a number",
        "classes",
        {
            "inputs": [tensor("IN_FP32", "FP32", [1, 2], [1, 2])],
            "outputs": [classified("OUT_FP32", "2")],
        },
    ),
    (
        "with another output",
        "classes",
        {
            "inputs": [
                tensor("IN_FP32", "FP32", [1, 3], [1, 2, 3]),
                tensor("IN_INT32", "INT32", [1, 1], [5]),
            ],
            "outputs": [classified("OUT_FP32", 2), {"name": "OUT_INT32"}],
        },
    ),
    (
        "not batching",
        "classes_nobatch",
        {
            "inputs": [tensor("IN_FP32", "FP32", [6], FP32_ROWS[:6])],
            "outputs": [classified("OUT_FP32", 3)],
        },
    ),
]

PLAIN = {
    "inputs": [tensor("IN_FP32", "FP32", [1, 3], [1, 2, 3])],
    "outputs": [{"name": "OUT_FP32"}],
}
BINARY = {
    "inputs": [tensor("IN_FP32", "FP32", [1, 3], [1, 2, 3])],
    "outputs": [{"name": "OUT_FP32", "parameters": {"binary_data": True}}],
}
BAD_SHAPE = {"inputs": [tensor("IN_FP32", "FP32", [1, 3], [1, 2])]}

# (name, request document, Accept-Encoding value): what Triton compresses and how.
COMPRESSION_CASES = [
    ("gzip", PLAIN, "gzip"),
    ("deflate", PLAIN, "deflate"),
    ("br is not compressed", PLAIN, "br"),
    ("q-values", PLAIN, "gzip;q=0.5, deflate;q=0.8"),
    ("q with a space is no type", PLAIN, "gzip; q=0.5, deflate"),
    ("identity first on a tie", PLAIN, "identity;q=1, gzip;q=1"),
    ("case matters", PLAIN, "GZIP"),
    ("a browser's list", PLAIN, "gzip, deflate, br"),
    ("zero weights", PLAIN, "deflate;q=0, gzip;q=0"),
    ("binary outputs, gzip", BINARY, "gzip"),
    ("binary outputs, deflate", BINARY, "deflate"),
    ("an error is not compressed", BAD_SHAPE, "gzip"),
]

# Headers of a response that a client reads (the others, e.g. their order, are free).
READ_HEADERS = ("content-type", "content-encoding", "inference-header-content-length")
