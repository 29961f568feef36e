"""Servers and clients for the TLS tests (tests/test_tls.py,
tests/grpc_clients/test_grpc_tls.py); the certificates are tools/tls_certs.py's."""

from __future__ import annotations

import socket
import ssl
import sys

from server_harness import REPO_ROOT, NaiadServer

sys.path.insert(0, str(REPO_ROOT / "tools"))
from tls_certs import Certs, make_certs, tls_flags  # noqa: E402

__all__ = ["Certs", "HttpsServer", "https_get", "make_certs", "plaintext_exchange", "tls_flags"]


class HttpsServer(NaiadServer):
    """A server whose HTTP port serves TLS (its health checks verify it against the CA,
    with the client certificate when TLS is mutual)."""

    scheme = "https"

    def __init__(self, repository, certs: Certs, *, mutual: bool = False, extra_args=(), **kw):
        self.requests_options = {"verify": str(certs.ca)}
        if mutual:
            self.requests_options["cert"] = (str(certs.client), str(certs.client_key))
        super().__init__(
            repository, extra_args=[*tls_flags("http", certs, mutual), *extra_args], **kw
        )


def https_get(host: str, port: int, certs: Certs, path: str, client_cert=None) -> bytes:
    """GET `path` over TLS (trusting the test CA; `client_cert`: (cert, key) to present)
    with Connection: close: the whole answer. ssl.SSLError or OSError when the server
    refuses the handshake or the client certificate."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert is not None:
        context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
    with (
        socket.create_connection((host, port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


def plaintext_exchange(host: str, port: int, data: bytes) -> bytes:
    """Sends `data` over plain TCP and returns what came back until the server closed."""
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(data)
        received = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk
