"""TLS on the gRPC and HTTP ports: the flags of `naiad serve`, and the listeners'
settings loaded from their PEM files at start-up.

gRPC takes Triton's flags with Triton's meaning: `--grpc-use-ssl`, `--grpc-server-cert`,
`--grpc-server-key`, `--grpc-root-cert`, and `--grpc-use-ssl-mutual` (which turns TLS on
too, and requires client certificates that chain to the root certificate). HTTPS is
beyond Triton, with the same five flags under `--http-`. The C++ I/O loop does the TLS
(csrc/tls/tls_stream.h); an HTTP port served by uvloop instead (no fast lane) gets the
same settings as an `ssl.SSLContext`. docs/tls.md is the user's page."""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass, field

__all__ = ["TlsSettings", "add_arguments", "load"]

# The ALPN protocol each port selects (gRPC clients require h2).
_ALPN = {"grpc": "h2", "http": "http/1.1"}


@dataclass
class TlsSettings:
    """One port's TLS: its files, and `context` (`_core.TlsContext`) loaded from them."""

    port: str  # "grpc" or "http"
    cert: str
    key: str
    root: str
    mutual: bool
    context: object = field(default=None, repr=False)

    def ssl_context(self) -> ssl.SSLContext:
        """The same settings for a listener Python's ssl module serves (uvloop)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        if self.root:
            context.load_verify_locations(self.root)
        if self.mutual:
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols([_ALPN[self.port]])
        return context


def add_arguments(serve: argparse.ArgumentParser, parse_bool) -> None:
    group = serve.add_argument_group(
        "TLS",
        "gRPC: Triton's flags; HTTPS: the same under --http- (beyond Triton). The files "
        "are PEM; a file that cannot be used stops the start (docs/tls.md)",
    )
    for port, what in (("grpc", "gRPC"), ("http", "HTTP")):
        group.add_argument(
            f"--{port}-use-ssl",
            type=parse_bool,
            default=False,
            help=f"serve {what} over TLS (needs --{port}-server-cert and --{port}-server-key)",
        )
        group.add_argument(
            f"--{port}-use-ssl-mutual",
            type=parse_bool,
            default=False,
            help=f"serve {what} over TLS and require a client certificate that chains to "
            f"--{port}-root-cert",
        )
        group.add_argument(
            f"--{port}-server-cert", default="", help="the server's certificate (chain)"
        )
        group.add_argument(f"--{port}-server-key", default="", help="its private key")
        group.add_argument(
            f"--{port}-root-cert",
            default="",
            help="the root certificate(s) client certificates must chain to (mutual TLS)",
        )


def load(options, port: str) -> TlsSettings | None:
    """The TLS settings `options` ask for on `port` ("grpc", "http"), their files
    loaded; None for plaintext. ValueError naming the flag or the file that is wrong."""
    mutual = bool(getattr(options, f"{port}_use_ssl_mutual", False))
    if not (getattr(options, f"{port}_use_ssl", False) or mutual):
        return None
    cert = getattr(options, f"{port}_server_cert", "") or ""
    key = getattr(options, f"{port}_server_key", "") or ""
    root = getattr(options, f"{port}_root_cert", "") or ""
    flag = f"--{port}-use-ssl-mutual" if mutual else f"--{port}-use-ssl"
    if not cert or not key:
        raise ValueError(f"{flag} needs --{port}-server-cert and --{port}-server-key")
    if mutual and not root:
        raise ValueError(f"{flag} needs --{port}-root-cert (the client certificates' root)")
    from naiad import _core

    settings = TlsSettings(port, cert, key, root, mutual)
    try:
        settings.context = _core.TlsContext(cert, key, root, mutual, _ALPN[port])
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    return settings
