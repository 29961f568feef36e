"""What a response cache hit costs next to a miss, on add_sub, side by side in one run.

    .venv/bin/python perf/cache_hit.py --requests 3000 --rounds 3

One Naiad server (this tree) with `--cache-config local,size=64M` serves add_sub with
`response_cache { enable: true }`, pinned to CPU 0 (the client to the others). One client
connection sends binary HTTP requests one at a time (concurrency 1), in alternating
blocks per round: **misses** (every request has new INPUT0 bytes, so it is looked up,
queued, run by the worker and its result kept) and **hits** (the same request again,
answered by the C++ lane from the cache). Per request it reports the wall time (the
client's round trip), the server's CPU time (frontend + worker, from /proc) and the
in-server latency (each request's time from its submit to its response: the statistics
extension's success duration, read between blocks, which leaves out the client and the
kernel's TCP round trip), medians over rounds, and the hit/miss ratios. The client is a
raw socket with prebuilt request bytes, so its own cost is small and the same for both. The machine is shared: read the
ratios, which are measured back to back, rather than the absolute figures.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import NaiadServer  # noqa: E402
from wrk_load import add_sub_body  # noqa: E402

PERF = Path(__file__).resolve().parent
REPO_ROOT = PERF.parent


class CachingNaiad(NaiadServer):
    def __init__(self, tree: Path, python: Path, cache_bytes: int) -> None:
        super().__init__(tree, python)
        self.cache_bytes = cache_bytes

    def command(self, repo: Path) -> list[str]:
        return [*super().command(repo), "--cache-config", f"local,size={self.cache_bytes}"]


def make_repo(dest: Path) -> Path:
    model = dest / "add_sub"
    (model / "1").mkdir(parents=True)
    source = PERF / "models" / "add_sub"
    config = (source / "config.pbtxt").read_text()
    (model / "config.pbtxt").write_text(config + "\nresponse_cache { enable: true }\n")
    (model / "1" / "model.py").write_text((source / "1" / "model.py").read_text())
    return dest


def request_bytes(port: int) -> tuple[bytes, int]:
    """tritonclient's binary add_sub request (wrk_load.add_sub_body) as HTTP bytes, and
    where INPUT0's bytes start in them."""
    body, headers = add_sub_body("binary")
    head = f"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
    for name, value in headers.items():
        head += f"{name}: {value}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body, len(head) + int(headers["Inference-Header-Content-Length"])


def read_response(sock: socket.socket, buffer: bytearray) -> None:
    """Reads one whole HTTP response (Content-Length framed) from `sock`."""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(buffer[:end]).lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 :].split(b"\r\n", 1)[0])
            if not head.startswith(b"http/1.1 200"):
                raise RuntimeError(f"server answered {bytes(buffer[: end + 4])!r}")
            total = end + 4 + length
            while len(buffer) < total:
                buffer += sock.recv(65536)
            del buffer[:total]
            return
        buffer += sock.recv(65536)


def _success(server) -> tuple[int, int]:
    """(count, ns) of add_sub's successful requests so far (the statistics extension:
    each request's time in the server, from its submit to its response)."""
    success = (server.statistics("add_sub") or {}).get("inference_stats", {}).get("success", {})
    return int(success.get("count", 0)), int(success.get("ns", 0))


def block(server, sock, template: bytes, at: int, count: int, serial: list, unique: bool):
    """`count` requests one at a time: (wall s, server CPU s, in-server s) per request.
    The statistics are read outside the timed and CPU-counted part."""
    message = bytearray(template)
    buffer = bytearray()
    count0, ns0 = _success(server)
    cpu0 = server.cpu_seconds()
    started = time.perf_counter()
    for _ in range(count):
        if unique:  # new INPUT0 bytes: a key never seen
            serial[0] += 1
            struct.pack_into("<q", message, at, serial[0])
        sock.sendall(message)
        read_response(sock, buffer)
    wall = time.perf_counter() - started
    cpu = server.cpu_seconds() - cpu0
    count1, ns1 = _success(server)
    if count1 - count0 != count:
        raise RuntimeError(f"the statistics count {count1 - count0} successes, not {count}")
    return wall / count, cpu / count, (ns1 - ns0) / 1e9 / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--naiad-tree", type=Path, default=REPO_ROOT)
    parser.add_argument("--python", type=Path, default=REPO_ROOT / ".venv" / "bin" / "python")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="naiad-cache-hit-"))
    repo = make_repo(work / "repo")
    server = CachingNaiad(args.naiad_tree, args.python, 64 << 20)
    cpus = [0] if (os.cpu_count() or 1) > 1 else None
    server.start(repo, cpus, work / "server.log")
    if cpus:
        os.sched_setaffinity(0, list(range(1, os.cpu_count())))
    rows = {"miss": [], "hit": []}
    try:
        sock = socket.create_connection(("127.0.0.1", server.http_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        template, at = request_bytes(server.http_port)
        serial = [0]
        block(server, sock, template, at, 200, serial, True)  # warm up both paths
        block(server, sock, template, at, 200, serial, False)
        for index in range(args.rounds):
            order = ("miss", "hit") if index % 2 == 0 else ("hit", "miss")
            for kind in order:
                rows[kind].append(
                    block(server, sock, template, at, args.requests, serial, kind == "miss")
                )
        sock.close()
        stats = server.statistics("add_sub") or {}
    finally:
        server.stop()
    inference = stats.get("inference_stats", {})
    hits, misses = inference.get("cache_hit", {}), inference.get("cache_miss", {})
    print(
        f"add_sub over HTTP (binary), concurrency 1, {args.requests} requests per block, "
        f"{args.rounds} rounds; server on CPU 0, client on the others; shared machine\n"
    )
    print(
        "| requests | client wall µs/request | server CPU µs/request | "
        "in-server latency µs/request |"
    )
    print("|---|---|---|---|")
    medians = {}
    for kind in ("miss", "hit"):
        medians[kind] = [statistics.median(r[i] for r in rows[kind]) * 1e6 for i in range(3)]
        print("| " + kind + " | " + " | ".join(f"{v:.1f}" for v in medians[kind]) + " |")
    ratios = [hit / miss for hit, miss in zip(medians["hit"], medians["miss"])]
    print("| hit / miss | " + " | ".join(f"{r:.3f}" for r in ratios) + " |")
    print(
        "\n(medians over rounds; server CPU: frontend + worker from /proc; in-server "
        "latency: the statistics extension's success duration, submit to response)"
    )
    print(
        f"\nserver statistics: cache_hit {hits.get('count')} "
        f"({hits.get('ns', 0) / max(hits.get('count') or 1, 1):.0f} ns per lookup), "
        f"cache_miss {misses.get('count')}, executions {stats.get('execution_count')}"
    )
    print(
        "rounds (wall µs, CPU µs, in-server µs):",
        {k: [tuple(round(x * 1e6, 1) for x in r) for r in v] for k, v in rows.items()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
