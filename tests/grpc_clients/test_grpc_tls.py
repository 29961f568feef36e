"""gRPC over TLS with Triton's flags (--grpc-use-ssl, --grpc-server-cert/-key,
--grpc-root-cert, --grpc-use-ssl-mutual; docs/tls.md), driven by tritonclient.grpc with
`ssl=True` and certificates the test makes (tests/tls_support.py); the same client
behaviour is checked against Triton 2.51 where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from server_harness import NaiadServer, make_repository
from tls_support import make_certs, tls_flags
from triton_peer import TritonPeer, needs_triton
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return make_repository(
        tmp_path_factory.mktemp("grpc-tls") / "models", ["add_sub", "identity_bytes"]
    )


@pytest.fixture(scope="module")
def tls_server(repository, certs, tmp_path_factory):
    server = NaiadServer(
        repository, log_dir=tmp_path_factory.mktemp("grpc-tls"), extra_args=tls_flags("grpc", certs)
    )
    with server.start():
        yield server


@pytest.fixture(scope="module")
def mutual_server(repository, certs, tmp_path_factory):
    server = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("grpc-mtls"),
        extra_args=tls_flags("grpc", certs, mutual=True),
    )
    with server.start():
        yield server


def _client(address: str, certs, client_cert=None) -> grpcclient.InferenceServerClient:
    kw = {}
    if client_cert is not None:
        kw = {"certificate_chain": str(client_cert[0]), "private_key": str(client_cert[1])}
    return grpcclient.InferenceServerClient(
        address, ssl=True, root_certificates=str(certs.ca), **kw
    )


def _add_sub(client) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


def test_grpc_over_tls_infers_on_the_lane_and_with_large_messages(tls_server, certs):
    with _client(f"{tls_server.host}:{tls_server.grpc_port}", certs) as client:
        assert client.is_server_live()
        for _ in range(3):
            _add_sub(client)
        # 602 KB each way: more than one flow-control window and many TLS records.
        big = np.array([[bytes(range(256)) * 2352]], dtype=np.object_)
        tensor = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
        tensor.set_data_from_numpy(big)
        for _ in range(2):
            result = client.infer("identity_bytes", [tensor])
            assert result.as_numpy("OUTPUT0")[0][0] == big[0][0]
        assert client.get_model_metadata("add_sub").name == "add_sub"


def test_plaintext_grpc_client_on_the_tls_port_fails_and_is_logged(tls_server, certs):
    address = f"{tls_server.host}:{tls_server.grpc_port}"
    with grpcclient.InferenceServerClient(address) as plain:
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=20)
    with _client(address, certs) as client:
        _add_sub(client)
    stderr = tls_server.stderr_text()
    assert "TLS connection closed: 127.0.0.1:" in stderr
    assert "handshake failed" in stderr


def test_tls_client_on_the_plaintext_grpc_port_fails_and_is_logged(repository, certs, tmp_path):
    server = NaiadServer(repository, log_dir=tmp_path)
    with server.start():
        address = f"{server.host}:{server.grpc_port}"
        with _client(address, certs) as client:
            with pytest.raises(InferenceServerException):
                client.is_server_live(client_timeout=20)
        with grpcclient.InferenceServerClient(address) as plain:
            _add_sub(plain)
        assert "serves without TLS" in server.stderr_text()


def _mutual_outcomes(address: str, certs) -> dict[str, bool]:
    """Whether each kind of client gets an answer from a mutual-TLS server at `address`."""
    outcomes = {}
    for name, cert in (
        ("ca client", (certs.client, certs.client_key)),
        ("no client certificate", None),
        ("other CA's client", (certs.other_client, certs.other_client_key)),
    ):
        with _client(address, certs, cert) as client:
            try:
                outcomes[name] = client.is_server_live(client_timeout=20)
            except InferenceServerException:
                outcomes[name] = False
    return outcomes


def test_mutual_tls_takes_only_client_certificates_of_the_root(mutual_server, certs):
    address = f"{mutual_server.host}:{mutual_server.grpc_port}"
    assert _mutual_outcomes(address, certs) == {
        "ca client": True,
        "no client certificate": False,
        "other CA's client": False,
    }
    with _client(address, certs, (certs.client, certs.client_key)) as client:
        _add_sub(client)
    assert mutual_server.stderr_text().count("TLS connection closed") >= 2


@needs_triton
def test_mutual_tls_outcomes_match_triton(mutual_server, repository, certs, tmp_path):
    flags = tls_flags("grpc", certs, mutual=True)
    with TritonPeer(repository, tmp_path, extra_args=flags) as triton:
        expected = _mutual_outcomes(f"127.0.0.1:{triton.grpc_port}", certs)
    address = f"{mutual_server.host}:{mutual_server.grpc_port}"
    assert _mutual_outcomes(address, certs) == expected
