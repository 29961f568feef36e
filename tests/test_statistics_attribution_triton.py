"""Differential: the same light load on add_sub (tritonclient HTTP and gRPC, raw HTTP)
to Naiad and the real Triton 2.51: the statistics extension's parts that are non-zero
are the same on both, and Naiad's queue + compute cover at least the share of the
request duration that Triton's cover (test_statistics_attribution.py says why)."""

from __future__ import annotations

import time

import pytest
from server_harness import NaiadServer, make_repository
from statistics_attribution_support import (
    MODEL,
    PARTS,
    covered_share,
    inference_stats,
    moved,
    send_load,
)
from triton_peer import TritonPeer, needs_triton

pytestmark = [
    pytest.mark.timeout(300),
    needs_triton,
]

# Rounding aside, both cover the whole duration; a share below this is a part gone
# missing, not a slow machine.
SLACK = 0.01


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("attribution_triton")
    repository = make_repository(tmp_path / "models", ["add_sub"])
    naiad = NaiadServer(repository, log_dir=tmp_path).start()
    try:
        with TritonPeer(repository, tmp_path, []) as triton:
            triton.wait_ready([MODEL])
            yield naiad, triton
    finally:
        naiad.stop()


def _nonzero(stats: dict) -> set:
    """The names of the statistics (inference_stats, and batch_stats by batch size)
    with a non-zero count or duration."""
    found = {
        f"inference_stats.{name}.{field}"
        for name, value in stats["inference_stats"].items()
        for field in ("count", "ns")
        if value[field]
    }
    for entry in stats["batch_stats"]:
        for name, value in entry.items():
            if name == "batch_size":
                continue
            for field in ("count", "ns"):
                if value[field]:
                    found.add(f"batch_stats[{entry['batch_size']}].{name}.{field}")
    return found


def _counted(server, total: int) -> dict:
    """The model's statistics once `total` requests are counted: Triton counts a request
    after it has answered it, so the last answer can come before its count."""
    deadline = time.monotonic() + 30
    while True:
        stats = inference_stats(server.http_port)
        if stats["inference_stats"]["success"]["count"] >= total or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def test_the_same_parts_are_counted_and_cover_as_much(servers):
    naiad, triton = servers
    shares = {}
    nonzero = {}
    for name, server in (("naiad", naiad), ("triton", triton)):
        start = inference_stats(server.http_port)["inference_stats"]["success"]["count"]
        first = send_load(server.http_port, server.grpc_port, 1)  # the first batch ran
        before = _counted(server, start + first)
        sent = send_load(server.http_port, server.grpc_port, 10)
        after = _counted(server, start + first + sent)
        stats = after["inference_stats"]
        assert moved(before["inference_stats"], stats, "success")[0] == sent, name
        shares[name] = covered_share(before["inference_stats"], stats)
        nonzero[name] = _nonzero(after)
        for part in PARTS:
            assert moved(before["inference_stats"], stats, part)[1] > 0, (name, part)
    assert nonzero["naiad"] == nonzero["triton"]
    assert shares["naiad"] <= 1.0
    assert shares["naiad"] >= shares["triton"] - SLACK, shares
