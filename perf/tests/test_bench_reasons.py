"""bench.py's reason for a perf_analyzer run stopped at its budget.

.venv/bin/python -m pytest perf/tests/test_bench_reasons.py -q
"""

from __future__ import annotations

import sys
from pathlib import Path

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF))

import bench  # noqa: E402

# perf_analyzer 2.41 -v, as a run against Naiad at HTTP c=32 printed it before it
# spent the rest of its budget summarizing pass 3.
VERBOSE_OUTPUT = b"""*** Measurement Settings ***
  Batch size: 1
  Using "time_windows" mode for stabilization
Request concurrency: 32
  Pass [1] throughput: 31861.4 infer/sec. Avg latency: 1002 usec (std 305 usec).
  Pass [2] throughput: 32603.9 infer/sec. Avg latency: 980 usec (std 547 usec).
"""


def test_the_reason_gives_the_passes_measured_before_the_budget_ran_out():
    reason = bench.timed_out_reason(84, VERBOSE_OUTPUT)
    assert reason.startswith("perf_analyzer timed out after 84s after 2 of its passes")
    assert "31,861, 32,604 infer/s" in reason and "quadratic" in reason


def test_without_a_pass_the_reason_is_the_timeout_alone():
    assert bench.timed_out_reason(84, None) == "perf_analyzer timed out after 84s"
    assert bench.timed_out_reason(84, "Request concurrency: 32\n") == (
        "perf_analyzer timed out after 84s"
    )
