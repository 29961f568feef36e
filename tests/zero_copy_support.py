"""The HTTP and gRPC zero-copy tests' server (tests/test_zero_copy.py,
tests/grpc_clients/test_grpc_zero_copy.py): a model that returns its two FP32 inputs as
they came, and the I/O loop's counters of answers' tensor bytes sent from the response
block or copied, and of requests' tensor bytes received in place or copied
(/v2/naiad/lanes)."""

from __future__ import annotations

import numpy as np
import requests
from held_support import wait_until
from server_harness import NaiadServer

__all__ = [
    "LARGE",
    "SMALL",
    "arena",
    "counts",
    "echo_counted",
    "in_counts",
    "settled",
    "start_server",
]

TIMEOUT = 10
LARGE = 3 * 224 * 224  # FP32 elements: 602 KB, the large-tensor scenario's
SMALL = 16  # 64 bytes: copied

_CONFIG = """
name: "identity_pair"
backend: "python"
max_batch_size: 8
input [
  { name: "IN0", data_type: TYPE_FP32, dims: [ -1 ] },
  { name: "IN1", data_type: TYPE_FP32, dims: [ -1 ] }
]
output [
  { name: "OUT0", data_type: TYPE_FP32, dims: [ -1 ] },
  { name: "OUT1", data_type: TYPE_FP32, dims: [ -1 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
"""

_MODEL = """
import triton_python_backend_utils as pb_utils


def _echo(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("OUT0", _echo(r, "IN0")),
                    pb_utils.Tensor("OUT1", _echo(r, "IN1")),
                ]
            )
            for r in requests
        ]
"""


def start_server(tmp_path_factory) -> NaiadServer:
    """A started server of the identity_pair model (the caller stops it)."""
    repository = tmp_path_factory.mktemp("zero_copy") / "models"
    folder = repository / "identity_pair"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(_CONFIG)
    (folder / "1" / "model.py").write_text(_MODEL)
    server = NaiadServer(repository, log_dir=tmp_path_factory.mktemp("zero_copy_logs"))
    return server.start(wait="ready", timeout=120)


def arena(server) -> dict:
    return requests.get(f"{server.url}/v2/naiad/arena", timeout=TIMEOUT).json()


def counts(server) -> tuple[int, int]:
    """(tensor bytes of answers sent from the response block, copied)."""
    lanes = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    return lanes["out_tensor_bytes_in_place"], lanes["out_tensor_bytes_copied"]


def in_counts(server) -> tuple[int, int]:
    """(tensor bytes of HTTP requests received straight into the arena, copied there)."""
    lanes = requests.get(f"{server.url}/v2/naiad/lanes", timeout=TIMEOUT).json()
    return lanes["in_tensor_bytes_in_place"], lanes["in_tensor_bytes_copied"]


def settled(server, blocks: int) -> None:
    """Waits until nothing is in flight and the arena holds `blocks` blocks again."""

    def back() -> bool:
        now = arena(server)
        return now["requests_in_flight"] == 0 and now["blocks_in_use"] == blocks

    wait_until(back, "the arena's blocks back")


def echo_counted(server, infer, in0: np.ndarray, in1: np.ndarray, times: int = 3):
    """Sends the pair `times` times through `infer(in0, in1) -> (out0, out1)`, checks
    the outputs came back as sent; the counters' growth meanwhile (in place, copied)."""
    before = counts(server)
    for _ in range(times):
        out0, out1 = infer(in0, in1)
        np.testing.assert_array_equal(out0, in0)
        np.testing.assert_array_equal(out1, in1)
    after = counts(server)
    return after[0] - before[0], after[1] - before[1]
