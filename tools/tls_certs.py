"""Test certificates for TLS, made by the `openssl` command: a CA, a server certificate
for localhost and 127.0.0.1 and a client certificate it signs, and a client certificate
of another CA (one a server must refuse). The C++ tests (tests/csrc/test_tls_io.cc), the
black-box tests (tests/tls_support.py) and perf/tls_load.py use them.

    python3 tools/tls_certs.py DIRECTORY
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path
    other_client: Path  # signed by another CA
    other_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(directory: Path) -> Certs:
    """Writes ca.pem, server.pem, client.pem, other-client.pem and their *-key.pem into
    `directory` (valid two days)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN={ca}", "-keyout", f"{ca}-key.pem", "-out", f"{ca}.pem", cwd=directory,
        )  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, ca, extra in (
        ("server", "ca", ["-extfile", "san.ext"]),
        ("client", "ca", []),
        ("other-client", "other-ca", []),
    ):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}-key.pem", "-out", f"{name}.csr", cwd=directory,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
            f"{ca}-key.pem", "-CAcreateserial", "-days", "2", *extra, "-out", f"{name}.pem",
            cwd=directory,
        )  # fmt: skip
    d = directory
    return Certs(
        d / "ca.pem",
        d / "server.pem",
        d / "server-key.pem",
        d / "client.pem",
        d / "client-key.pem",
        d / "other-client.pem",
        d / "other-client-key.pem",
    )


def tls_flags(port: str, certs: Certs, mutual: bool = False) -> list[str]:
    """`naiad serve`'s flags for TLS on `port` ("grpc", "http") with `certs`."""
    flags = [
        f"--{port}-use-ssl=true",
        f"--{port}-server-cert={certs.server}",
        f"--{port}-server-key={certs.server_key}",
        f"--{port}-root-cert={certs.ca}",
    ]
    if mutual:
        flags.append(f"--{port}-use-ssl-mutual=true")
    return flags


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    make_certs(Path(sys.argv[1]))
