#!/usr/bin/env python3
"""Start-up time: from launching the server to `/v2/health/ready` answering 200, on one
repository of N Python models with M instances each, Naiad and the real Triton 2.51
one after the other (order alternating between rounds).

    .venv/bin/python perf/startup.py --models 10 --instances 2 --rounds 3

Naiad loads models and their instances in parallel (`--model-load-thread-count`, 4 by
default as Triton). Results: a markdown table on stdout and perf/results/startup-<time>/.

`--s3` adds a row for Naiad serving the same repository from an S3 bucket (moto in server
mode on a free port, the `test` extra installs it): the cost of listing and downloading
the models at start-up, against the local folder.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from servers import TOOLS, NaiadServer, TritonServer, free_port, http_get

PERF = Path(__file__).resolve().parent
ROOT = PERF.parent
ADD_SUB = PERF / "models" / "add_sub"


def build_repository(dest: Path, models: int, instances: int) -> Path:
    """`models` copies of perf/models/add_sub, named add_sub_0.., each with `instances`
    CPU instances."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    config = (ADD_SUB / "config.pbtxt").read_text()
    for index in range(models):
        name = f"add_sub_{index}"
        shutil.copytree(ADD_SUB, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        text = config.replace('name: "add_sub"', f'name: "{name}"')
        text = _set_instance_count(text, instances)
        (dest / name / "config.pbtxt").write_text(text)
    return dest


def _set_instance_count(config: str, count: int) -> str:
    replaced, n = re.subn(r"count:\s*\d+", f"count: {count}", config)
    if n == 0:
        replaced += f"\ninstance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"
    return replaced


def time_to_ready(server, repo: Path, log_path: Path, timeout: float = 300.0) -> float:
    """Seconds from Popen to the first 200 from /v2/health/ready (polled every 20 ms)."""
    server.http_port, server.grpc_port, server.metrics_port = free_port(), free_port(), free_port()
    server.log_path = log_path
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        start = time.monotonic()
        server.proc = subprocess.Popen(
            server.command(repo),
            env=server.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        while time.monotonic() - start < timeout:
            if server.proc.poll() is not None:
                raise RuntimeError(f"{server.label} exited while starting:\n{server.log_tail()}")
            try:
                status, _ = http_get(f"http://{server.http_url}/v2/health/ready", timeout=1.0)
                if status == 200:
                    return time.monotonic() - start
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{server.label} not ready after {timeout:.0f}s")
    finally:
        server.stop()


class S3Repository:
    """The repository uploaded to a bucket of a moto S3 server started for the run."""

    def __init__(self, repo: Path, log_path: Path):
        import boto3

        port = free_port()
        self.endpoint = f"127.0.0.1:{port}"
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        client = boto3.client(
            "s3",
            endpoint_url="http://" + self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="perf",
            aws_secret_access_key="perf",
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket="perf")
                break
            except Exception:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for path in sorted(repo.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                client.upload_file(str(path), "perf", "repo/" + str(path.relative_to(repo)))
        self.url = f"s3://{self.endpoint}/perf/repo"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class NaiadS3(NaiadServer):
    """Naiad serving `url` (an s3:// repository) instead of the local folder."""

    def __init__(self, url: str):
        super().__init__(ROOT, ROOT / ".venv" / "bin" / "python", label="naiad (s3, moto)")
        self.url = url

    def command(self, repo: Path) -> list[str]:
        return super().command(self.url)  # type: ignore[arg-type]

    def env(self) -> dict[str, str]:
        return {**super().env(), "AWS_ACCESS_KEY_ID": "perf", "AWS_SECRET_ACCESS_KEY": "perf"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", type=Path, default=TOOLS, help="perf/setup_tools.sh's folder")
    parser.add_argument("--no-triton", action="store_true")
    parser.add_argument("--s3", action="store_true", help="also Naiad from an S3 bucket (moto)")
    options = parser.parse_args()

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = PERF / "results" / f"startup-{stamp}"
    repo = build_repository(out / "repository", options.models, options.instances)
    servers = [NaiadServer(ROOT, ROOT / ".venv" / "bin" / "python")]
    if not options.no_triton:
        if (options.tools / "triton" / "bin" / "tritonserver").exists():
            servers.append(TritonServer(options.tools))
        else:
            print(
                f"triton not found under {options.tools}: run perf/setup_tools.sh", file=sys.stderr
            )
    s3 = S3Repository(repo, out / "moto.log") if options.s3 else None
    if s3 is not None:
        servers.append(NaiadS3(s3.url))
    times: dict[str, list[float]] = {s.label: [] for s in servers}
    try:
        for round_ in range(options.rounds):
            order = servers if round_ % 2 == 0 else list(reversed(servers))
            for server in order:
                slug = re.sub(r"[^a-z0-9]+", "-", server.label.lower()).strip("-")
                log = out / f"{slug}-{round_}.log"
                seconds = time_to_ready(server, repo, log)
                times[server.label].append(seconds)
                print(
                    f"round {round_}: {server.label} ready after {seconds:.2f} s", file=sys.stderr
                )
    finally:
        if s3 is not None:
            s3.stop()
    title = f"{options.models} Python models x {options.instances} instances"
    lines = [
        f"Start-up to /v2/health/ready, {title}, {options.rounds} rounds",
        "",
        "| server | median s | min s | max s |",
        "|---|---|---|---|",
    ]
    for label, values in times.items():
        lines.append(
            f"| {label} | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    (out / "raw.json").write_text(json.dumps(times, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
