"""HTTPS on the HTTP port (--http-use-ssl and its files, docs/tls.md) and the start-up
errors of TLS flags, against `naiad serve` with certificates the test makes
(tests/tls_support.py). gRPC over TLS: tests/grpc_clients/test_grpc_tls.py."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys

import gevent.ssl
import numpy as np
import pytest
import tritonclient.http as httpclient
from server_harness import NaiadServer, make_repository
from tls_support import HttpsServer, https_get, make_certs, plaintext_exchange, tls_flags

pytestmark = pytest.mark.timeout(300)

READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(tmp_path_factory.mktemp("tls") / "models", ["add_sub", "identity_bytes"])


@pytest.fixture(scope="module")
def https_server(repository, certs, tmp_path_factory):
    server = HttpsServer(repository, certs, log_dir=tmp_path_factory.mktemp("https"))
    with server.start():
        yield server


def _client(server, certs, **kw):
    return httpclient.InferenceServerClient(
        f"{server.host}:{server.http_port}",
        ssl=True,
        ssl_context_factory=lambda: gevent.ssl.create_default_context(cafile=str(certs.ca)),
        **kw,
    )


def test_tritonclient_http_infers_over_https_on_the_lane_and_with_large_tensors(
    https_server, certs
):
    client = _client(https_server, certs)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a, binary_data=True)
    for _ in range(3):  # one keep-alive connection, several requests
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)
    # 602 KB each way, more than the socket takes at once in either direction.
    big = np.array([[bytes(range(256)) * 2352]], dtype=np.object_)
    tensor = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
    tensor.set_data_from_numpy(big, binary_data=True)
    result = client.infer("identity_bytes", [tensor])
    assert result.as_numpy("OUTPUT0")[0][0] == big[0][0]
    assert client.is_server_ready()
    client.close()


def test_https_on_the_uvloop_fallback(repository, certs, tmp_path):
    """--http-io-loop=false: uvloop's transports serve HTTP, and Python's ssl the TLS,
    from the same files; mutual TLS takes only client certificates of the root."""
    server = HttpsServer(
        repository, certs, mutual=True, log_dir=tmp_path, extra_args=["--http-io-loop=false"]
    )
    with server.start():

        def context():
            context = gevent.ssl.create_default_context(cafile=str(certs.ca))
            context.load_cert_chain(str(certs.client), str(certs.client_key))
            return context

        client = httpclient.InferenceServerClient(
            f"{server.host}:{server.http_port}", ssl=True, ssl_context_factory=context
        )
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for tensor in inputs:
            tensor.set_data_from_numpy(a, binary_data=True)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        big = np.array([[bytes(range(256)) * 2352]], dtype=np.object_)
        tensor = httpclient.InferInput("INPUT0", [1, 1], "BYTES")
        tensor.set_data_from_numpy(big, binary_data=True)
        assert client.infer("identity_bytes", [tensor]).as_numpy("OUTPUT0")[0][0] == big[0][0]
        client.close()
        # Another CA's client certificate, none, or plaintext: refused; still serving.
        other = (certs.other_client, certs.other_client_key)
        for client_cert in (other, None):
            # TLS 1.3: the client's handshake ends before the server checks its
            # certificate, so the refusal may come as an alert or as a close.
            try:
                answer = https_get(
                    server.host, server.http_port, certs, "/v2/health/ready", client_cert
                )
            except (ssl.SSLError, OSError):
                answer = b""
            assert answer == b"", answer
        assert plaintext_exchange(server.host, server.http_port, READY) == b""
        answer = https_get(
            server.host,
            server.http_port,
            certs,
            "/v2/health/ready",
            (certs.client, certs.client_key),
        )
        assert answer.startswith(b"HTTP/1.1 200"), answer


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_with_the_ca_gets_ready_and_metadata(https_server, certs):
    out = subprocess.run(
        ["curl", "-sS", "--cacert", str(certs.ca), f"{https_server.url}/v2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"extensions"' in out.stdout
    unverified = subprocess.run(
        ["curl", "-sS", f"{https_server.url}/v2/health/ready"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unverified.returncode == 60, unverified.stderr  # the CA is not trusted


def test_plaintext_client_on_the_https_port_is_closed_and_logged(https_server, certs):
    assert plaintext_exchange(https_server.host, https_server.http_port, READY) == b""
    answer = https_get(https_server.host, https_server.http_port, certs, "/v2/health/ready")
    assert answer.startswith(b"HTTP/1.1 200")
    stderr = https_server.stderr_text()
    assert "TLS connection closed: 127.0.0.1:" in stderr
    assert "handshake failed" in stderr


def test_mutual_https_takes_only_client_certificates_of_the_root(repository, certs, tmp_path):
    server = HttpsServer(repository, certs, mutual=True, log_dir=tmp_path)
    with server.start():
        host, port = server.host, server.http_port
        good = https_get(host, port, certs, "/v2/health/ready", (certs.client, certs.client_key))
        assert good.startswith(b"HTTP/1.1 200")
        with pytest.raises((ssl.SSLError, OSError)):
            https_get(host, port, certs, "/v2/health/ready")
        with pytest.raises((ssl.SSLError, OSError)):
            https_get(
                host, port, certs, "/v2/health/ready", (certs.other_client, certs.other_client_key)
            )
        again = https_get(host, port, certs, "/v2/health/ready", (certs.client, certs.client_key))
        assert again.startswith(b"HTTP/1.1 200")
        stderr = server.stderr_text()
    assert stderr.count("TLS connection closed") >= 2
    assert "certificate" in stderr


def test_tls_client_on_a_plaintext_http_port_is_closed_and_logged(repository, certs, tmp_path):
    server = NaiadServer(repository, log_dir=tmp_path)
    with server.start():
        with pytest.raises((ssl.SSLError, OSError)):
            https_get(server.host, server.http_port, certs, "/v2/health/ready")
        answer = plaintext_exchange(
            server.host,
            server.http_port,
            READY.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"),
        )
        assert answer.startswith(b"HTTP/1.1 200")
        assert "serves without TLS" in server.stderr_text()


def _serve_fails(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    repository = make_repository(tmp_path / "models", [])
    return subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--model-repository", str(repository), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("port", ["grpc", "http"])
def test_bad_certificate_files_stop_the_start_naming_the_file(port, certs, tmp_path):
    missing = tmp_path / "missing.pem"
    cases = {
        f"--{port}-server-cert={missing}": f"'{missing}' cannot be read",
        f"--{port}-server-cert={certs.server_key}": f"server certificate '{certs.server_key}'",
        f"--{port}-server-key={certs.client_key}": f"server key '{certs.client_key}' does not match",
    }
    for override, expected in cases.items():
        flag = override.split("=", 1)[0]
        args = [a for a in tls_flags(port, certs) if not a.startswith(flag + "=")] + [override]
        out = _serve_fails(args, tmp_path)
        assert out.returncode == 1, out.stderr
        assert f"--{port}-use-ssl: " in out.stderr
        assert expected in out.stderr
    out = _serve_fails([f"--{port}-use-ssl=true"], tmp_path)
    assert out.returncode == 1
    assert f"--{port}-use-ssl needs --{port}-server-cert and --{port}-server-key" in out.stderr
    args = [a for a in tls_flags(port, certs, mutual=True) if "root-cert" not in a]
    out = _serve_fails(args, tmp_path)
    assert out.returncode == 1
    assert f"--{port}-use-ssl-mutual needs --{port}-root-cert" in out.stderr


def test_serve_help_documents_the_tls_flags():
    out = subprocess.run(
        [sys.executable, "-m", "naiad", "serve", "--help"], capture_output=True, text=True
    )
    for port in ("grpc", "http"):
        for flag in ("use-ssl", "use-ssl-mutual", "server-cert", "server-key", "root-cert"):
            assert f"--{port}-{flag}" in out.stdout
