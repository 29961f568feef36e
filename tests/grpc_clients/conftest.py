"""The tests that drive Naiad with tritonclient.grpc / grpcio clients.

They run in a pytest process of their own (`make test-python` runs two): tritonclient's
generated modules and Naiad's (naiad.protos) both register `model_config.proto` and the
`inference.*` messages in protobuf's default descriptor pool, with different contents,
and one process cannot hold both. tests/conftest.py leaves this folder out unless
NAIAD_GRPC_CLIENT_TESTS is set; run them with
`NAIAD_GRPC_CLIENT_TESTS=1 .venv/bin/python -m pytest tests/grpc_clients`.
"""

import pytest
import tritonclient.grpc as grpcclient


@pytest.fixture(scope="module")
def client(server):
    """A tritonclient gRPC client of the module's `server` fixture (a module may define
    its own `client` instead)."""
    with grpcclient.InferenceServerClient(f"{server.host}:{server.grpc_port}") as client:
        yield client
