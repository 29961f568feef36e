"""What the iterative-sequence tests read from a server: the statistics each run of a
rescheduled request changes. Used by tests/test_iterative_sequence.py (HTTP, not
decoupled) and tests/grpc_clients/test_grpc_iterative_sequence.py (decoupled)."""

from __future__ import annotations

import time

import requests

TIMEOUT = 60


def run_counts(url: str, model: str, sequences: int) -> dict:
    """`model`'s counts at the server `url` (HTTP) once the `sequences` iterative
    sequences it ran have ended: Triton 2.51 counts the cancelled request that ends
    each (a failure) just after the sequence's answer, so it is polled until then."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        stats = requests.get(f"{url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
        (entry,) = stats["model_stats"]
        inference = entry["inference_stats"]
        if inference["fail"]["count"] >= sequences or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return {
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        "success": inference["success"]["count"],
        "fail": inference["fail"]["count"],
        "queue": inference["queue"]["count"],
        "compute_infer": inference["compute_infer"]["count"],
        "batch_stats": [
            (batch["batch_size"], batch["compute_infer"]["count"]) for batch in entry["batch_stats"]
        ],
    }


def all_runs(runs: int, sequences: int) -> dict:
    """The counts after `runs` runs, each of one request of one row, of `sequences`
    iterative sequences, as Triton 2.51 counts them."""
    return {
        "inference_count": runs,
        "execution_count": runs,
        "success": runs,
        "fail": sequences,
        "queue": runs,
        "compute_infer": runs,
        "batch_stats": [(1, runs)],
    }
