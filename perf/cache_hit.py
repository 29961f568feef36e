"""What a response cache hit costs next to a miss, on add_sub, side by side in one run.

    .venv/bin/python perf/cache_hit.py --requests 3000 --rounds 3 [--cache redis]

One Naiad server (this tree) with `--cache-config local,size=64M` serves add_sub with
`response_cache { enable: true }`, pinned to CPU 0 (the client to the others). One client
connection sends binary HTTP requests one at a time (concurrency 1), in alternating
blocks per round: **misses** (every request has new INPUT0 bytes, so it is looked up,
queued, run by the worker and its result kept) and **hits** (the same request again,
answered by the C++ lane from the cache). Per request it reports the wall time (the
client's round trip), the server's CPU time (frontend + worker threads, in ns from the
scheduler's count, /proc/<pid>/task/<tid>/schedstat, not /proc/<pid>/stat's 10 ms
ticks; also split into frontend and worker) and the
in-server latency (each request's time from its submit to its response: the statistics
extension's success duration, read between blocks, which leaves out the client and the
kernel's TCP round trip), medians over rounds, and the hit/miss ratios. Each round also
times a floor block: a uvloop server on the same CPU that answers each request with the
bytes of Naiad's hit reply and does nothing else (what the kernel and the event loop cost
per request, which no work in the server removes). `--pipeline N` sends N requests in one
write before reading their answers. The client is a
raw socket with prebuilt request bytes, so its own cost is small and the same for both. The machine is shared: read the
ratios, which are measured back to back, rather than the absolute figures.
`--cache redis` keeps the cache in a redis-server this script starts on a free port
(tests/redis_support.py) instead of the local cache.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent / "tests"))

from servers import NaiadServer  # noqa: E402
from wrk_load import add_sub_body  # noqa: E402

PERF = Path(__file__).resolve().parent
REPO_ROOT = PERF.parent


class CachingNaiad(NaiadServer):
    def __init__(self, tree: Path, python: Path, cache_flags: list[str]) -> None:
        super().__init__(tree, python)
        self.cache_flags = cache_flags

    def command(self, repo: Path) -> list[str]:
        return [*super().command(repo), *self.cache_flags]


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


def read_response(sock: socket.socket, buffer: bytearray, keep: bool = False):
    """Reads one whole HTTP response (Content-Length framed) from `sock`; with `keep`,
    returns its bytes."""
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
            kept = bytes(buffer[:total]) if keep else None
            del buffer[:total]
            return kept
        buffer += sock.recv(65536)


def _success(server) -> tuple[int, int]:
    """(count, ns) of add_sub's successful requests so far (the statistics extension:
    each request's time in the server, from its submit to its response)."""
    success = (server.statistics("add_sub") or {}).get("inference_stats", {}).get("success", {})
    return int(success.get("count", 0)), int(success.get("ns", 0))


def block(
    server, sock, template: bytes, at: int, count: int, serial: list, unique: bool, pipeline=1
):
    """`count` requests, `pipeline` at a time (sent in one write, then their answers
    read): (wall s, server CPU s, in-server s, frontend CPU
    s, worker CPU s) per request. The statistics and the process list are read outside
    the timed and CPU-counted part."""
    count -= count % pipeline
    message = bytearray(template * pipeline)
    buffer = bytearray()
    count0, ns0 = _success(server)
    pids = server.group_pids()
    frontend = [server.proc.pid]
    workers = [pid for pid in pids if pid != server.proc.pid]
    front0, work0 = server.cpu_ns(frontend), server.cpu_ns(workers)
    started = time.perf_counter()
    for _ in range(count // pipeline):
        if unique:  # new INPUT0 bytes: a key never seen
            for k in range(pipeline):
                serial[0] += 1
                struct.pack_into("<q", message, k * len(template) + at, serial[0])
        sock.sendall(message)
        for _ in range(pipeline):
            read_response(sock, buffer)
    wall = time.perf_counter() - started
    front = (server.cpu_ns(frontend) - front0) / 1e9
    work = (server.cpu_ns(workers) - work0) / 1e9
    count1, ns1 = _success(server)
    if count1 - count0 != count:
        raise RuntimeError(f"the statistics count {count1 - count0} successes, not {count}")
    if server.group_pids() != pids:
        raise RuntimeError("the server's processes changed during a block")
    return (
        wall / count,
        (front + work) / count,
        (ns1 - ns0) / 1e9 / count,
        front / count,
        work / count,
    )


def serve_floor(port: int, reply_path: str) -> None:
    """The floor: a uvloop server (the loop Naiad's frontend runs on) that does no work,
    answering each request it sees begin with the bytes of Naiad's hit reply. What it
    costs per request is the kernel's loopback TCP, the wake-ups and the event loop: the
    part of a hit's CPU that no work in the server can remove."""
    import asyncio

    import uvloop

    reply = Path(reply_path).read_bytes()

    class Floor(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(reply * data.count(b"POST "))

    loop = uvloop.new_event_loop()
    loop.run_until_complete(loop.create_server(Floor, "127.0.0.1", port))
    print("ready", flush=True)
    loop.run_forever()


class FloorServer:
    def __init__(self, python: Path, reply: bytes, work: Path, cpus) -> None:
        (work / "reply.bin").write_bytes(reply)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.proc = subprocess.Popen(
            [str(python), __file__, "--floor-serve", str(self.port), str(work / "reply.bin")],
            stdout=subprocess.PIPE,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        if self.proc.stdout.readline().strip() != b"ready":
            raise RuntimeError("the floor server did not start")

    def cpu_ns(self) -> int:
        return NaiadServer.cpu_ns(self, [self.proc.pid])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def floor_block(floor: FloorServer, sock, template: bytes, count: int, pipeline: int):
    """As block(), against the floor server: (wall s, CPU s) per request."""
    count -= count % pipeline
    message = template * pipeline
    buffer = bytearray()
    cpu0 = floor.cpu_ns()
    started = time.perf_counter()
    for _ in range(count // pipeline):
        sock.sendall(message)
        for _ in range(pipeline):
            read_response(sock, buffer)
    wall = time.perf_counter() - started
    return wall / count, (floor.cpu_ns() - cpu0) / 1e9 / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per block")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pipeline",
        type=int,
        default=1,
        help="requests sent together in one write before their answers are read (1: one at a time)",
    )
    parser.add_argument("--naiad-tree", type=Path, default=REPO_ROOT)
    parser.add_argument("--python", type=Path, default=REPO_ROOT / ".venv" / "bin" / "python")
    parser.add_argument("--cache", choices=("local", "redis"), default="local")
    parser.add_argument("--floor-serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_serve:
        serve_floor(int(args.floor_serve[0]), args.floor_serve[1])
        return 0

    work = Path(tempfile.mkdtemp(prefix="naiad-cache-hit-"))
    repo = make_repo(work / "repo")
    redis = None
    flags = ["--cache-config", f"local,size={64 << 20}"]
    if args.cache == "redis":
        from redis_support import RedisServer

        redis = RedisServer(work).start()
        flags = [
            "--cache-config",
            "redis,host=127.0.0.1",
            "--cache-config",
            f"redis,port={redis.port}",
        ]
    server = CachingNaiad(args.naiad_tree, args.python, flags)
    cpus = [0] if (os.cpu_count() or 1) > 1 else None
    server.start(repo, cpus, work / "server.log")
    if cpus:
        os.sched_setaffinity(0, list(range(1, os.cpu_count())))
    rows = {"miss": [], "hit": [], "floor": []}
    floor = None
    try:
        sock = socket.create_connection(("127.0.0.1", server.http_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        template, at = request_bytes(server.http_port)
        serial = [0]
        block(server, sock, template, at, 200, serial, True)  # warm up both paths
        block(server, sock, template, at, 200, serial, False)
        sock.sendall(template)
        floor = FloorServer(args.python, read_response(sock, bytearray(), True), work, cpus)
        floor_sock = socket.create_connection(("127.0.0.1", floor.port))
        floor_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        floor_block(floor, floor_sock, template, 200, args.pipeline)
        for index in range(args.rounds):
            order = ("miss", "hit", "floor") if index % 2 == 0 else ("floor", "hit", "miss")
            for kind in order:
                if kind == "floor":
                    rows[kind].append(
                        floor_block(floor, floor_sock, template, args.requests, args.pipeline)
                    )
                    continue
                rows[kind].append(
                    block(
                        server,
                        sock,
                        template,
                        at,
                        args.requests,
                        serial,
                        kind == "miss",
                        args.pipeline,
                    )
                )
        sock.close()
        floor_sock.close()
        stats = server.statistics("add_sub") or {}
    finally:
        server.stop()
        if floor is not None:
            floor.stop()
        if redis is not None:
            redis.kill()
    inference = stats.get("inference_stats", {})
    hits, misses = inference.get("cache_hit", {}), inference.get("cache_miss", {})
    print(
        f"add_sub over HTTP (binary), {args.cache} cache, one connection, "
        f"{args.pipeline} request(s) in flight, "
        f"{args.requests} requests per block, "
        f"{args.rounds} rounds; server on CPU 0, client on the others; shared machine\n"
    )
    print(
        "| requests | client wall µs/request | server CPU µs/request | "
        "in-server latency µs/request | frontend CPU µs | worker CPU µs |"
    )
    print("|---|---|---|---|---|---|")
    medians = {}
    for kind in ("miss", "hit"):
        medians[kind] = [statistics.median(r[i] for r in rows[kind]) * 1e6 for i in range(5)]
        print("| " + kind + " | " + " | ".join(f"{v:.1f}" for v in medians[kind]) + " |")
    ratios = [hit / miss for hit, miss in zip(medians["hit"][:3], medians["miss"][:3])]
    print("| hit / miss | " + " | ".join(f"{r:.3f}" for r in ratios) + " | | |")
    medians["floor"] = [statistics.median(r[i] for r in rows["floor"]) * 1e6 for i in range(2)]
    print(
        "| floor (uvloop, no work) | "
        + " | ".join(f"{v:.1f}" for v in medians["floor"])
        + " | | | |"
    )
    print(
        "| floor / miss | "
        + " | ".join(f"{f / m:.3f}" for f, m in zip(medians["floor"], medians["miss"]))
        + " | | | |"
    )
    cpu_ratios = [h[1] / m[1] for h, m in zip(rows["hit"], rows["miss"])]
    print(
        "\n(medians over rounds; server CPU: frontend + worker threads, the scheduler's ns "
        "count from /proc/<pid>/task/*/schedstat; in-server latency: the statistics "
        "extension's success duration, submit to response)"
    )
    print(
        "hit/miss server CPU per round: "
        + ", ".join(f"{r:.3f}" for r in cpu_ratios)
        + f" (max {max(cpu_ratios):.3f})"
    )
    print(
        "hit minus floor, server CPU per round (µs): "
        + ", ".join(f"{(h[1] - f[1]) * 1e6:.1f}" for h, f in zip(rows["hit"], rows["floor"]))
    )
    print(
        f"\nserver statistics: cache_hit {hits.get('count')} "
        f"({hits.get('ns', 0) / max(hits.get('count') or 1, 1):.0f} ns per lookup), "
        f"cache_miss {misses.get('count')}, executions {stats.get('execution_count')}"
    )
    print(
        "rounds (wall µs, CPU µs, in-server µs, frontend µs, worker µs; floor: wall, CPU):",
        {k: [tuple(round(x * 1e6, 1) for x in r) for r in v] for k, v in rows.items()},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
