"""Every flag of `tritonserver --help` (2.51) starts `naiad serve` (issue 41).

The flag list is tests/data/tritonserver_2.51_flags.txt (the file says how it was made).
Each flag is parsed by naiad's own parser with a value of Triton's syntax; the flags
Naiad has no use for are logged at start-up with what they do here, and those asking
for what it does not serve stop the start. Two servers prove the meanings Naiad
implements: --id, --model-config-name, --model-load-retry-count, --allow-cpu-metrics,
--allow-http/--allow-grpc/--allow-metrics and --reuse-http-port/--reuse-grpc-port."""

from __future__ import annotations

import argparse
import contextlib
import errno
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
import requests
from naiad import cli
from naiad.flags import cli_triton
from naiad.protos import grpc_service_pb2 as service_pb2
from naiad.protos import grpc_service_pb2_grpc as service_pb2_grpc
from server_harness import REPO_ROOT, NaiadServer, make_repository

FLAGS_FILE = Path(__file__).parent / "data" / "tritonserver_2.51_flags.txt"


def _triton_flags() -> list[tuple[str, str]]:
    """(flag, argument syntax or '' for a switch) of tritonserver --help."""
    flags = []
    for line in FLAGS_FILE.read_text().splitlines():
        if line.startswith("--"):
            flag, _, syntax = line.partition(" ")
            flags.append((flag, syntax))
    return flags


# A value of Triton's syntax for each kind of argument, and for the flags whose value
# must be one of a few words or of a form of their own.
_BY_SYNTAX = {
    "<boolean>": "true",
    "<integer>": "3",
    "<float>": "6.5",
    "<string>": "value",
    "<<integer>:<integer>>": "0:67108864",
    "<<device_id>:<fraction>>": "0:0.5",
    "<<integer>-<integer>>": "8081-8090",
    "<<string>=<string>>": "summary_latencies=true",
    "<<string>:<integer>:<integer>>": "R1:4:0",
    "<<string>:<string>=<string>>": "health:key=value",
}
_BY_FLAG = {
    "--log-format": "ISO8601",
    "--model-control-mode": "explicit",
    "--rate-limit": "execution_count",
    "--grpc-infer-response-compression-level": "high",
    "--trace-level": "TIMESTAMPS",
    "--trace-config": "triton,file=/tmp/trace.json",
    "--backend-config": "onnxruntime,default-max-batch-size=4",
    "--cache-config": "local,size=1048576",
    "--host-policy": "gpu0,numa-node=0",
    "--http-address": "127.0.0.1",
    "--grpc-address": "127.0.0.1",
    "--metrics-address": "127.0.0.1",
}


def _serve_parser() -> argparse.ArgumentParser:
    return cli.build_parser()._subparsers._group_actions[0].choices["serve"]


def _parse(*args: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["serve", "--model-repository", "/models", *args])


def test_flag_list_is_tritons():
    flags = _triton_flags()
    assert len(flags) == 87 and len({f for f, _ in flags}) == 87
    assert ("--id", "<string>") in flags and ("--disable-auto-complete-config", "") in flags


@pytest.mark.parametrize("flag,syntax", [f for f in _triton_flags() if f[0] != "--help"])
def test_every_triton_flag_parses(flag, syntax):
    """Naiad's parser takes the flag in both of getopt's spellings with a value of
    Triton's syntax, and the value reaches the options (not the default)."""
    action = next(a for a in _serve_parser()._actions if flag in a.option_strings)
    default = _parse().__dict__[action.dest]
    if not syntax:
        assert getattr(_parse(flag), action.dest) is True
        return
    value = _BY_FLAG.get(flag) or _BY_SYNTAX[syntax]
    if syntax == "<boolean>" and default is True:
        value = "false"
    joined = getattr(_parse(f"{flag}={value}"), action.dest)
    separate = getattr(_parse(flag, value), action.dest)
    assert joined == separate
    assert joined != default, f"{flag} {value} left the default {default!r}"


def test_help_is_usage():
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 0 and "--model-load-retry-count" in result.stdout


def test_bad_values_are_usage_errors():
    for args in (
        ["--http-thread-count=many"],
        ["--cuda-memory-pool-byte-size=64"],
        ["--grpc-infer-response-compression-level=max"],
        ["--allow-sagemaker=maybe"],
        ["--sagemaker-safe-port-range=8081"],
    ):
        with pytest.raises(SystemExit) as exited:
            _parse(*args)
        assert exited.value.code == 2, args


_REFUSED = ("--model-namespacing",)


def test_flags_without_effect_are_each_noted():
    """Every flag Naiad takes without acting on it gives a start-up line naming it and
    its value; a refused switch given false asks for nothing and is not noted."""
    group = next(
        g
        for g in _serve_parser()._action_groups
        if g.title == "tritonserver flags without effect here"
    )
    in_group = {option for action in group._group_actions for option in action.option_strings}
    args, flags = [], []
    for flag, syntax in _triton_flags():
        if flag in in_group:
            value = _BY_FLAG.get(flag) or _BY_SYNTAX[syntax]
            if syntax == "<boolean>":
                value = "false" if flag in _REFUSED else "true"
            args.append(f"{flag}={value}")
            flags.append((flag, value))
    notes = cli_triton.startup_notes(_parse(*args))
    noted = {note.split("=", 1)[0] for note in notes}
    for flag, value in flags:
        if value == "false":
            assert flag not in noted
        else:
            assert flag in noted, flag
    assert not any(note.startswith("--http-thread-count") for note in notes)  # honoured
    assert cli_triton.startup_error(_parse(*args)) is None


@pytest.mark.parametrize(
    "flag,words",
    [
        ("--model-namespacing=true", "model namespacing is not implemented"),
    ],
)
def test_unserved_features_stop_the_start(tmp_path, flag, words):
    result = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", f"--model-repository={tmp_path}", flag],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"error: {flag.split('=')[0]}=true: " in result.stderr
    assert words in result.stderr


# -- servers --------------------------------------------------------------------------

_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {batch}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

_FLAKY = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "tried")
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("flaky: the first load fails")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "INPUT0")])
            for r in requests
        ]
"""


def _model(repository: Path, name: str, batch: int, dims: int = 1) -> Path:
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(_CONFIG.format(name=name, batch=batch, dims=dims))
    (folder / "1" / "model.py").write_text(_FLAKY)
    return folder


@pytest.fixture(scope="module")
def flagged(tmp_path_factory):
    """A server with Triton's flags: a custom config name, a load retry, a name, no CPU
    metrics, keepalive PINGs, a ping policy, the HTTP port reusable, and flags without
    effect here."""
    repository = tmp_path_factory.mktemp("repo")
    custom = _model(repository, "custom", 8)
    (custom / "tried").touch()  # loads the first time
    (custom / "configs").mkdir()
    (custom / "configs" / "small.pbtxt").write_text(_CONFIG.format(name="custom", batch=2, dims=1))
    (custom / "configs" / "other.pbtxt").write_text("not a config")
    (_model(repository, "plain", 4) / "tried").touch()
    _model(repository, "flaky", 4)
    server = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("flagged"),
        extra_args=[
            "--id=edge-1",
            "--model-config-name=small",
            "--model-load-retry-count=1",
            "--allow-cpu-metrics=false",
            "--reuse-http-port=true",
            "--http-thread-count=4",
            "--cuda-memory-pool-byte-size=0:1024",
            "--grpc-infer-allocation-pool-size=16",
            "--grpc-http2-max-ping-strikes=2",
            "--grpc-keepalive-time=100",
            "--grpc-keepalive-timeout=3000",
            "--grpc-keepalive-permit-without-calls=true",
        ],
    )
    with server:
        yield server


def test_id_names_the_server(flagged):
    assert requests.get(flagged.url + "/v2", timeout=10).json()["name"] == "edge-1"


def test_model_config_name_picks_the_custom_config(flagged):
    def batch(name):
        return requests.get(f"{flagged.url}/v2/models/{name}/config", timeout=10).json()[
            "max_batch_size"
        ]

    assert batch("custom") == 2  # configs/small.pbtxt
    assert batch("plain") == 4  # no configs/small.pbtxt: config.pbtxt


def test_model_load_retry_count_loads_again(flagged):
    assert requests.get(f"{flagged.url}/v2/models/flaky/ready", timeout=10).status_code == 200
    log = flagged.stderr_text()
    assert "failed to load 'flaky' version 1: " in log and "retrying (1 of 1)" in log
    assert "failed to load 'plain'" not in log  # loaded the first time: no retry
    assert "flaky: the first load fails" in log


def test_cpu_metrics_off(flagged):
    text = requests.get(f"http://127.0.0.1:{flagged.metrics_port}/metrics", timeout=10).text
    assert "nv_inference_count" in text
    assert "nv_cpu_" not in text


def test_flags_without_effect_are_logged(flagged):
    log = flagged.stderr_text()
    assert "--http-thread-count=4: 4 C++ I/O thread(s) serve the HTTP and gRPC ports" in log
    assert "--cuda-memory-pool-byte-size=0:1024: accepted" in log
    assert "--grpc-infer-allocation-pool-size=16: accepted" in log


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED


def _shares_port(port: int) -> bool:
    """Whether a socket with SO_REUSEPORT can bind the listening `port` (only when the
    server's socket set it too)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE
            return False
        return True


def test_reuse_http_port(flagged):
    assert _shares_port(flagged.http_port)
    assert not _shares_port(flagged.metrics_port)  # no reuse flag for it


def test_keepalive_pings(flagged):
    """--grpc-keepalive-time=100 with --grpc-keepalive-permit-without-calls: PINGs on
    an idle connection; one answered keeps it open, the next one unanswered past
    --grpc-keepalive-timeout closes it."""
    with socket.create_connection(("127.0.0.1", flagged.grpc_port)) as sock:
        sock.settimeout(60)
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(0x4, 0, b""))
        frames = _H2Frames(sock)
        ping = frames.next_of(0x6)
        assert ping is not None and not ping[0] & 0x1  # a PING, not an ACK
        sock.sendall(_h2_frame(0x6, 0x1, ping[1]))  # its ACK
        again = frames.next_of(0x6)
        assert again is not None and again[1] == ping[1]
        assert frames.next_of(0x6) is None  # not answered: closed, no third PING


def test_too_many_pings(flagged):
    """--grpc-http2-max-ping-strikes=2 (the interval: 300000 ms by default): a client
    that PINGs four times in a row while the server sends nothing gets GOAWAY
    ENHANCE_YOUR_CALM "too_many_pings" and is disconnected (the server's own keepalive
    PINGs are answered meanwhile)."""
    with socket.create_connection(("127.0.0.1", flagged.grpc_port)) as sock:
        sock.settimeout(60)
        pings = b"".join(_h2_frame(0x6, 0, b"client%02d" % i) for i in range(4))
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(0x4, 0, b"") + pings)
        goaway = _H2Frames(sock, ack_pings=True).next_of(0x7)
        assert goaway is not None
        assert int.from_bytes(goaway[1][4:8], "big") == 0xB  # ENHANCE_YOUR_CALM
        assert goaway[1][8:] == b"too_many_pings"
        assert sock.recv(65536) == b""  # then closed


def _h2_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + bytes(4) + payload


class _H2Frames:
    """The frames a raw HTTP/2 client socket reads."""

    def __init__(self, sock, ack_pings: bool = False):
        self.sock = sock
        self.buffer = b""
        self.ack_pings = ack_pings  # answer the server's PINGs while reading

    def next_of(self, kind: int):
        """(flags, payload) of the next frame of `kind`; None once the server closed."""
        while True:
            while len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + length:
                    break
                frame = self.buffer[3], self.buffer[4], self.buffer[9 : 9 + length]
                self.buffer = self.buffer[9 + length :]
                if frame[0] == kind:
                    return frame[1], frame[2]
                if self.ack_pings and frame[0] == 0x6 and not frame[1] & 0x1:
                    self.sock.sendall(_h2_frame(0x6, 0x1, frame[2]))
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk


def test_allow_grpc_false(tmp_path):
    """--allow-grpc=false --allow-metrics=false: only HTTP listens."""
    repository = tmp_path / "empty"
    repository.mkdir()
    server = NaiadServer(
        repository,
        log_dir=tmp_path / "log",
        extra_args=["--allow-grpc=false", "--allow-metrics=false"],
    )
    with server:
        assert requests.get(server.url + "/v2/health/ready", timeout=10).status_code == 200
        assert _refused(server.grpc_port) and _refused(server.metrics_port)


def _goaway_then_close(port: int) -> list[int]:
    """The frame types a client that sent only the HTTP/2 preface reads until the
    server closes the connection."""
    frames, buffer = [], b""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        sock.settimeout(60)
        while chunk := sock.recv(65536):
            buffer += chunk
            while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                frames.append(buffer[3])
                buffer = buffer[9 + int.from_bytes(buffer[:3], "big") :]
    return frames


class _CountingProxy:
    """Forwards TCP connections to `port`, counting the bytes the server sends."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.from_server = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source, sink, counted: bool) -> None:
        try:
            while data := source.recv(65536):
                if counted:  # before the client can have them
                    self.from_server += len(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def _infer_zeros(port: int, size: int) -> bytes:
    """ModelInfer of echo with `size` FP32 zeros, through a new channel: OUTPUT0's bytes."""
    request = service_pb2.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32")
    tensor.shape.extend([1, size])
    request.raw_input_contents.append(bytes(4 * size))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return stub.ModelInfer(request, timeout=60).raw_output_contents[0]


def test_grpc_only_server(tmp_path_factory):
    """--allow-http=false --allow-metrics=false: only gRPC listens (with
    --reuse-grpc-port, shareable); readiness is asked over gRPC. With
    --grpc-max-connection-age an idle connection gets GOAWAY, and, no call being
    open, is closed. With --grpc-infer-response-compression-level a large answer of
    zeros reaches the client compressed (far fewer bytes on the wire)."""
    repository = make_repository(tmp_path_factory.mktemp("repo"), ["add_sub"])
    (_model(repository, "echo", 1, dims=65536) / "tried").touch()
    server = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("grpc_only"),
        extra_args=[
            "--allow-http=false",
            "--allow-metrics=false",
            "--reuse-grpc-port=true",
            "--grpc-max-connection-age=200",
            "--grpc-infer-response-compression-level=high",
        ],
    )
    server.start(wait=None)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            deadline = time.monotonic() + 120
            while True:
                # A call may meet the connection's age limit: asked again.
                assert server.running(), server.stderr_text()[-3000:]
                try:
                    request = service_pb2.ModelReadyRequest(name="add_sub")
                    if stub.ModelReady(request, timeout=5).ready:
                        break
                except grpc.RpcError:
                    pass
                assert time.monotonic() < deadline, "add_sub not ready over gRPC"
                time.sleep(0.1)
        assert _refused(server.http_port) and _refused(server.metrics_port)
        assert _shares_port(server.grpc_port)
        frames = _goaway_then_close(server.grpc_port)
        assert frames[0] == 0x4 and 0x7 in frames  # SETTINGS, ..., GOAWAY, then closed
        proxy = _CountingProxy(server.grpc_port)
        try:
            assert _infer_zeros(proxy.port, 65536) == bytes(4 * 65536)
            assert proxy.from_server < 65536  # of 256 KiB answered
        finally:
            proxy.close()
    finally:
        server.stop()


def _full_command_line(tmp: Path, repository: Path) -> tuple[list[str], set[str]]:
    """Every flag of the list at once, with values a Triton deployment could pass on a
    host without a GPU, TLS, SageMaker or Vertex AI (those switches false); and the
    flags left out, each for its reason."""
    store = tmp / "store"  # --model-store: a second repository, empty
    store.mkdir()
    values = {
        "--id": "triton",
        "--exit-timeout-secs": "5",
        "--log-verbose": "0",
        "--log-info": "true",
        "--log-warning": "true",
        "--log-error": "true",
        "--log-format": "ISO8601",
        "--log-file": str(tmp / "server.log"),
        "--model-store": str(store),
        "--exit-on-error": "true",
        "--disable-auto-complete-config": None,
        "--strict-readiness": "true",
        "--model-control-mode": "explicit",
        "--repository-poll-secs": "15",
        "--load-model": "add_sub",
        "--model-config-name": "production",
        "--model-load-thread-count": "2",
        "--model-load-retry-count": "1",
        "--model-namespacing": "false",
        "--enable-peer-access": "true",
        "--allow-http": "true",
        "--http-address": "127.0.0.1",
        "--reuse-http-port": "false",
        "--http-header-forward-pattern": "x-forward-.*",
        "--http-thread-count": "8",
        "--http-restricted-api": "shared-memory:admin-key=secret",
        "--allow-grpc": "true",
        "--grpc-address": "127.0.0.1",
        "--reuse-grpc-port": "false",
        "--grpc-header-forward-pattern": "x-forward-.*",
        "--grpc-infer-allocation-pool-size": "16",
        "--grpc-use-ssl": "false",
        "--grpc-use-ssl-mutual": "false",
        "--grpc-server-cert": "/etc/tls/server.crt",
        "--grpc-server-key": "/etc/tls/server.key",
        "--grpc-root-cert": "/etc/tls/ca.crt",
        "--grpc-infer-response-compression-level": "low",
        "--grpc-keepalive-time": "7200000",
        "--grpc-keepalive-timeout": "20000",
        "--grpc-keepalive-permit-without-calls": "false",
        "--grpc-http2-max-pings-without-data": "2",
        "--grpc-http2-min-recv-ping-interval-without-data": "300000",
        "--grpc-http2-max-ping-strikes": "2",
        "--grpc-max-connection-age": "3600000",
        "--grpc-max-connection-age-grace": "60000",
        "--grpc-restricted-protocol": "shared-memory:admin-key=secret",
        "--allow-sagemaker": "false",
        "--sagemaker-port": "8080",
        "--sagemaker-safe-port-range": "8081-8090",
        "--sagemaker-thread-count": "8",
        "--allow-vertex-ai": "false",
        "--vertex-ai-port": "8080",
        "--vertex-ai-thread-count": "8",
        "--vertex-ai-default-model": "add_sub",
        "--allow-metrics": "true",
        "--allow-gpu-metrics": "true",
        "--allow-cpu-metrics": "true",
        "--metrics-address": "127.0.0.1",
        "--metrics-interval-ms": "2000",
        "--metrics-config": "summary_latencies=true",
        "--trace-config": "rate=1000",
        "--backend-directory": "/opt/tritonserver/backends",
        "--backend-config": "onnxruntime,default-max-batch-size=4",
        "--repoagent-directory": "/opt/tritonserver/repoagents",
        "--cache-config": "local,size=1048576",
        "--cache-directory": "/opt/tritonserver/caches",
        "--rate-limit": "execution_count",
        "--rate-limit-resource": "R1:4:0",
        "--pinned-memory-pool-byte-size": "268435456",
        "--cuda-memory-pool-byte-size": "0:67108864",
        "--cuda-virtual-address-size": "0:1073741824",
        "--min-supported-compute-capability": "6.0",
        "--buffer-manager-thread-count": "0",
        "--host-policy": "gpu0,numa-node=0",
        "--model-load-gpu-limit": "0:0.9",
        "--strict-model-config": "true",
        "--trace-file": str(tmp / "trace.json"),
        "--trace-level": "OFF",
        "--trace-rate": "1000",
        "--trace-count": "-1",
        "--trace-log-frequency": "0",
    }
    left_out = {
        "--help",  # prints the usage instead
        "--response-cache-byte-size",  # refused with --cache-config, as by Triton
        # given by the test harness:
        "--model-repository",
        "--http-port",
        "--grpc-port",
        "--metrics-port",
    }
    args = []
    for flag, value in values.items():
        args.append(flag if value is None else f"{flag}={value}")
    return args, left_out


def test_every_flag_at_once_starts_a_server(tmp_path):
    """A command line with every tritonserver 2.51 flag starts naiad serve, which
    serves the model with the meanings given (explicit load, the server's name, the
    custom config name falling back to config.pbtxt) and logs each flag it takes without
    effect."""
    repository = make_repository(tmp_path / "repo", ["add_sub"])
    args, left_out = _full_command_line(tmp_path, repository)
    given = {arg.split("=", 1)[0] for arg in args}
    assert given | left_out == {flag for flag, _ in _triton_flags()}
    server = NaiadServer(repository, log_dir=tmp_path / "logs", extra_args=args)
    with server:
        assert requests.get(server.url + "/v2", timeout=10).json()["name"] == "triton"
        body = {
            "inputs": [
                {"name": name, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
                for name in ("INPUT0", "INPUT1")
            ]
        }
        answer = requests.post(server.url + "/v2/models/add_sub/infer", json=body, timeout=30)
        assert answer.status_code == 200
        assert answer.json()["outputs"][0]["data"] == [2.0] * 16
    log = (tmp_path / "server.log").read_text()
    assert "--http-thread-count=8: 8 C++ I/O thread(s)" in log
    for flag in (
        "--host-policy=gpu0,numa-node=0",
        "--grpc-infer-allocation-pool-size",
    ):
        assert flag in log and "accepted for Triton's command line" in log


def test_thread_count_flags_size_one_io_engine():
    """--http-thread-count and --grpc-infer-thread-count size the same I/O threads: the
    larger wins; neither: 1; --http-max-connections: 1; out of 1..63: refused, named."""
    from naiad.flags.io_threads import io_threads

    assert io_threads(_parse()) == 1
    assert io_threads(_parse("--http-thread-count=3")) == 3
    assert io_threads(_parse("--grpc-infer-thread-count=4", "--http-thread-count=2")) == 4
    assert io_threads(_parse("--http-thread-count=4", "--http-max-connections=10")) == 1
    for bad in ("--http-thread-count=0", "--grpc-infer-thread-count=64"):
        with pytest.raises(ValueError, match=bad.split("=")[0][2:]):
            io_threads(_parse(bad))
