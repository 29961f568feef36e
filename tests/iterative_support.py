"""What the iterative-sequence tests read from a server: the statistics each run of a
rescheduled request changes. Used by tests/test_iterative_sequence.py (HTTP, not
decoupled) and tests/grpc_clients/test_grpc_iterative_sequence.py (decoupled)."""

from __future__ import annotations

import requests

TIMEOUT = 60


def run_counts(url: str, model: str) -> dict:
    """`model`'s counts at the server `url` (HTTP). Not `fail`: Triton 2.51 counts one
    failure per iterative sequence some time after it ended (its sequence batcher's idle
    reaper), which Naiad does not copy."""
    stats = requests.get(f"{url}/v2/models/{model}/stats", timeout=TIMEOUT).json()
    (entry,) = stats["model_stats"]
    inference = entry["inference_stats"]
    return {
        "inference_count": entry["inference_count"],
        "execution_count": entry["execution_count"],
        "success": inference["success"]["count"],
        "queue": inference["queue"]["count"],
        "compute_infer": inference["compute_infer"]["count"],
        "batch_stats": [
            (batch["batch_size"], batch["compute_infer"]["count"]) for batch in entry["batch_stats"]
        ],
    }


def all_runs(runs: int, batch_size: int = 1) -> dict:
    """The counts after `runs` runs of one request each (`batch_size` rows)."""
    return {
        "inference_count": runs * batch_size,
        "execution_count": runs,
        "success": runs,
        "queue": runs,
        "compute_infer": runs,
        "batch_stats": [(batch_size, runs)],
    }
