"""gRPC answers' tensors sent from the response block (csrc/ipc/block_views.h): raw
output contents of a page or more go into the HTTP/2 DATA frames the flow-control
windows allow as views of the block, smaller ones are copied; /v2/naiad/lanes counts
both (tests/zero_copy_support.py). The block returns to the arena once sent."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from zero_copy_support import LARGE, SMALL, arena, echo_counted, settled, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    naiad = start_server(tmp_path_factory)
    yield naiad
    naiad.stop()


def _infer(client, in0: np.ndarray, in1: np.ndarray):
    inputs = [
        grpcclient.InferInput("IN0", [1, in0.size], "FP32"),
        grpcclient.InferInput("IN1", [1, in1.size], "FP32"),
    ]
    inputs[0].set_data_from_numpy(in0.reshape(1, -1))
    inputs[1].set_data_from_numpy(in1.reshape(1, -1))
    result = client.infer("identity_pair", inputs)
    return result.as_numpy("OUT0").reshape(-1), result.as_numpy("OUT1").reshape(-1)


def test_raw_outputs_of_a_page_or_more_go_from_the_block_smaller_ones_are_copied(client, server):
    rng = np.random.default_rng(5)
    cases = [(LARGE, LARGE), (LARGE, SMALL), (SMALL, SMALL)]
    baseline = arena(server)["blocks_in_use"]
    for in0_size, in1_size in cases:
        in0 = rng.standard_normal(in0_size).astype(np.float32)
        in1 = rng.standard_normal(in1_size).astype(np.float32)
        in_place, copied = echo_counted(server, lambda a, b: _infer(client, a, b), in0, in1)
        # Each output its own way; bytes past what the client's windows allowed at
        # once wait in the stream's queue, copied: the large ones are mostly in place.
        viewable = sum(a.nbytes for a in (in0, in1) if a.nbytes >= 4096)
        assert in_place + copied == 3 * (in0.nbytes + in1.nbytes), (in0_size, in1_size)
        assert in_place <= 3 * viewable
        if viewable:
            assert in_place >= 3 * viewable // 2, (in_place, copied)
        else:
            assert in_place == 0
    settled(server, baseline)
