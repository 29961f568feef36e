"""Which HTTP layer for the front end: httptools under our own protocol, or uvicorn?

Both serve the same handler on uvloop, pinned to one CPU: parse the infer request's JSON
with orjson and answer a fixed add_sub-shaped JSON response. `wrk` (pinned to the other
CPU, 8 connections) drives each in turn, alternating over rounds. Run it with
`perf/http_frontend_bench.sh`, which installs uvicorn and wrk first.

    python perf/http_frontend_bench.py serve-naiad PORT   # our HttpProtocol (httptools)
    python perf/http_frontend_bench.py serve-uvicorn PORT # uvicorn, httptools parser, ASGI
    python perf/http_frontend_bench.py compare            # both, side by side
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson

BODY = orjson.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": [2.0] * 16},
        ]
    }
)
RESPONSE = orjson.dumps(
    {
        "model_name": "add_sub",
        "model_version": "1",
        "outputs": [
            {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16], "data": [3.0] * 16},
            {"name": "OUTPUT1", "datatype": "FP32", "shape": [1, 16], "data": [-1.0] * 16},
        ],
    }
)
PATH = "/v2/models/add_sub/infer"


def handle(body: bytes) -> bytes:
    request = orjson.loads(body)
    assert len(request["inputs"]) == 2
    return RESPONSE


def serve_naiad(port: int) -> None:
    import asyncio

    import uvloop
    from naiad.http.protocol import HttpProtocol
    from naiad.http.routes import JSON, Reply

    class Router:
        def dispatch(self, request):
            return Reply(200, JSON, (handle(request.body),))

    async def main():
        loop = asyncio.get_running_loop()
        router = Router()
        await loop.create_server(lambda: HttpProtocol(router, loop), "127.0.0.1", port)
        await asyncio.Event().wait()

    uvloop.run(main())


async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = handle(b"".join(chunks))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def serve_uvicorn(port: int) -> None:
    import uvicorn

    uvicorn.run(
        asgi_app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="error",
        access_log=False,
        lifespan="off",
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wrk(port: int, seconds: int, lua: Path) -> float:
    out = subprocess.run(
        [
            "taskset",
            "-c",
            "1",
            "wrk",
            "-t1",
            "-c8",
            f"-d{seconds}s",
            "-s",
            str(lua),
            f"http://127.0.0.1:{port}{PATH}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def compare(rounds: int = 3, seconds: int = 3) -> None:
    lua = Path(os.environ.get("TMPDIR", "/tmp")) / "naiad_http_bench.lua"
    lua.write_text(
        'wrk.method = "POST"\nwrk.body = [[' + BODY.decode() + "]]\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    results: dict[str, list[float]] = {"naiad-httptools": [], "uvicorn-httptools": []}
    modes = {"naiad-httptools": "serve-naiad", "uvicorn-httptools": "serve-uvicorn"}
    for round_index in range(rounds):
        order = list(modes) if round_index % 2 == 0 else list(reversed(modes))
        for name in order:
            port = _free_port()
            server = subprocess.Popen(
                ["taskset", "-c", "0", sys.executable, __file__, modes[name], str(port)]
            )
            try:
                for _ in range(100):
                    try:
                        socket.create_connection(("127.0.0.1", port), 0.1).close()
                        break
                    except OSError:
                        time.sleep(0.1)
                results[name].append(_wrk(port, seconds, lua))
            finally:
                server.terminate()
                server.wait(10)
    print(f"wrk -t1 -c8, {rounds} rounds x {seconds}s, server on CPU 0, wrk on CPU 1")
    print("| server | requests/s (median) | rounds |")
    print("|---|---|---|")
    for name, values in results.items():
        values.sort()
        print(
            f"| {name} | {values[len(values) // 2]:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |"
        )


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "compare"
    if command == "serve-naiad":
        serve_naiad(int(sys.argv[2]))
    elif command == "serve-uvicorn":
        serve_uvicorn(int(sys.argv[2]))
    else:
        compare()
