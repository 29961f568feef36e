"""Helpers for the cloud repository tests: storage servers started on free ports, model
files to upload, and a naiad server whose --model-repository flags name cloud paths.

The storage servers are real protocol servers (moto's S3 in server mode, the GCS
emulator) started as child processes of the test run and stopped by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from server_harness import EXAMPLE_MODELS, HOST, NaiadServer, free_port

TIMEOUT = 60.0


def wait_until(condition, what: str, timeout: float = TIMEOUT) -> None:
    """Waits for observable state; the deadline only turns a hang into a failure."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def add_sub_files(name: str = "add_sub", versions=(1,)) -> dict[str, bytes]:
    """The example add_sub model under the name `name`: relative key -> content."""
    source = EXAMPLE_MODELS / "add_sub"
    config = (source / "config.pbtxt").read_text().replace('name: "add_sub"', f'name: "{name}"')
    model = (source / "1" / "model.py").read_bytes()
    files = {f"{name}/config.pbtxt": config.encode()}
    for version in versions:
        files[f"{name}/{version}/model.py"] = model
    return files


def files_under(folder: Path) -> list[str]:
    """Every file and folder below `folder`, relative (what is left in a cache folder)."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


class StorageServer:
    """A storage service as a child process on a free 127.0.0.1 port."""

    def __init__(self, argv: list[str], log_dir: Path, env: dict | None = None):
        self.port = free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self.log_path = Path(log_dir) / f"storage-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, *[a.format(port=self.port, host=HOST) for a in argv]],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        wait_until(self._listening, f"{argv[1]} to listen on port {self.port}")

    def _listening(self) -> bool:
        assert self.process.poll() is None, self.log_path.read_text(errors="replace")
        with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 0.5):
            return True
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(20)


def moto_server(log_dir: Path, unauthenticated_actions: int) -> StorageServer:
    """moto's S3 (and IAM) in server mode. After `unauthenticated_actions` requests it
    checks every request's signature against the access keys made through its IAM."""
    return StorageServer(
        ["-m", "moto.server", "-H", "{host}", "-p", "{port}"],
        log_dir,
        {"INITIAL_NO_AUTH_ACTION_COUNT": str(unauthenticated_actions)},
    )


def gcs_emulator(log_dir: Path) -> StorageServer:
    return StorageServer(
        ["-m", "gcp_storage_emulator", "start", "--host", "{host}", "--port", "{port}", "-M"],
        log_dir,
    )


BUCKET = "models"


class S3:
    """moto's S3 with one user whose keys sign every request after the set-up."""

    def __init__(self, log_dir):
        # Three unsigned actions: the user, its policy and its key.
        self.server = moto_server(log_dir, unauthenticated_actions=3)
        self.endpoint = self.server.endpoint
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="naiad")
        iam.put_user_policy(
            UserName="naiad",
            PolicyName="s3",
            PolicyDocument=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
                }
            ),
        )
        key = iam.create_access_key(UserName="naiad")["AccessKey"]
        self.key_id = key["AccessKeyId"]
        self.secret = key["SecretAccessKey"]
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=self.key_id,
            aws_secret_access_key=self.secret,
        )
        self.client.create_bucket(Bucket=BUCKET)

    def url(self, prefix: str, bucket: str = BUCKET) -> str:
        """Triton's path for another S3 service: s3://host:port/bucket/path."""
        return f"s3://{self.endpoint.removeprefix('http://')}/{bucket}/{prefix}"

    def upload(self, prefix: str, files: dict[str, bytes]) -> None:
        for key, content in files.items():
            self.client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=content)

    def delete(self, prefix: str) -> None:
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
        for item in listed.get("Contents", ()):
            self.client.delete_object(Bucket=BUCKET, Key=item["Key"])

    def env(self) -> dict:
        return {
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "TRITON_CLOUD_CREDENTIAL_PATH": None,
        }


class CloudServer(NaiadServer):
    """`naiad serve` with the given --model-repository paths (cloud or local) and extra
    environment variables (credentials, cache folder)."""

    def __init__(self, repositories: list[str], env: dict[str, str | None], **kwargs):
        super().__init__(repositories[0], env=env, **kwargs)
        self.repositories = [str(r) for r in repositories]

    @property
    def command(self) -> list[str]:
        command = super().command
        at = command.index("--model-repository")
        repositories = [arg for r in self.repositories for arg in ("--model-repository", r)]
        return command[:at] + repositories + command[at + 2 :]


def serve_fails(repositories: list[str], env: dict[str, str], log_dir: Path) -> str:
    """Starts `naiad serve` expecting it to stop at start-up: its exit code must be 1;
    returns its stderr."""
    server = CloudServer(repositories, env, log_dir=log_dir, name="naiad-fails")
    server.start(wait=None)
    code = server.wait_exit(120)
    assert code == 1, f"naiad serve exited with {code}:\n{server.stderr_text()[-3000:]}"
    return server.stderr_text()
