"""The Python backend's batch path in one process, without the ring: CPU time per request
of what a worker does with a batch of add_sub requests once it has it, split into building
the backend's Batch (worker.main._batch: the inputs' numpy views), the backend's execute
(pb_utils requests, the model's execute, the results checked) and writing the response
block (_core.encode_results_block, the C++ writer respond_results uses).

    .venv/bin/python perf/worker_batch.py --batch 8 --batch 48
    PYTHONPATH=/other/tree/pysrc .venv/bin/python perf/worker_batch.py   # another tree

CPU time of this thread (time.thread_time_ns), not wall time, so that a shared machine's
other processes inflate it less; the best of --repeat runs of --iterations batches. The
requests share one header and their inputs lie row after row in one batch-major tensor,
as the core lays out a batch of identical requests (csrc/ipc/ipc_schema.h). It leaves out the
ring, the wake-ups and the cold caches of a worker that shares a core with its frontend:
perf/cost.py measures the whole worker. Each request names both outputs, as tritonclient,
perf_analyzer and perf/wrk_load.py's binary body do; `--all-outputs`: requests that name
none (a KServe v2 JSON body without "outputs").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import orjson
from naiad import _core
from naiad.backends.python import PythonModelBackend
from naiad.worker import main as worker
from naiad.worker import results as worker_results

MODEL_DIR = Path(__file__).resolve().parent / "models" / "add_sub"
ROW_BYTES = 16 * 4  # add_sub's [1, 16] FP32 input


def _backend() -> PythonModelBackend:
    config = {
        "name": "add_sub",
        "max_batch_size": 64,
        "input": [
            {"name": name, "data_type": "TYPE_FP32", "dims": [16]} for name in ("INPUT0", "INPUT1")
        ],
        "output": [
            {"name": name, "data_type": "TYPE_FP32", "dims": [16]}
            for name in ("OUTPUT0", "OUTPUT1")
        ],
    }
    return PythonModelBackend(
        {
            "model_config": json.dumps(config),
            "model_instance_kind": "CPU",
            "model_instance_name": "add_sub_0_0",
            "model_instance_device_id": "0",
            "model_repository": str(MODEL_DIR),
            "model_version": "1",
            "model_name": "add_sub",
        }
    )


def measure(backend, size: int, iterations: int, repeat: int, outputs: list) -> dict:
    """Best µs per request of each step, over `repeat` runs of `iterations` batches of
    requests naming `outputs` (none: all of them)."""
    arena = memoryview(bytearray(1 << 20))
    metadata = orjson.dumps(
        {
            "id": "",
            "inputs": [["INPUT0", "FP32", [1, 16]], ["INPUT1", "FP32", [1, 16]]],
            "outputs": outputs or None,
            "parameters": {},
        }
    )
    starts = (4096, 4096 + size * ROW_BYTES)
    blocks = [
        (bytes(metadata), tuple((start + i * ROW_BYTES, ROW_BYTES) for start in starts))
        for i in range(size)
    ]
    tensors = [(start, size * ROW_BYTES) for start in starts]
    timings = [0, 0, 0, 0]
    best = {"batch": float("inf"), "execute": float("inf"), "encode": float("inf")}
    clock = time.thread_time_ns
    for _ in range(repeat):
        spent = dict.fromkeys(best, 0)
        for _ in range(iterations):
            t0 = clock()
            batch = worker._batch(arena, blocks, tensors)
            t1 = clock()
            results = backend.execute(batch)
            t2 = clock()
            _core.encode_results_block(
                results,
                timings,
                worker._FAST_WIRE,
                worker._OUTPUT_NAMES,
                worker_results.wire_one,
            )
            t3 = clock()
            spent["batch"] += t1 - t0
            spent["execute"] += t2 - t1
            spent["encode"] += t3 - t2
        for step, ns in spent.items():
            best[step] = min(best[step], ns / iterations / size / 1000)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, action="append", help="requests per batch (repeatable)")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--all-outputs", action="store_true", help="requests that name no output (all of them)"
    )
    args = ap.parse_args()
    outputs = [] if args.all_outputs else ["OUTPUT0", "OUTPUT1"]
    backend = _backend()
    print("| batch | build Batch | execute | response block | total µs CPU / request |")
    print("|---|---|---|---|---|")
    for size in args.batch or [8, 48]:
        measure(backend, size, 200, 1, outputs)  # warm up
        best = measure(backend, size, args.iterations, args.repeat, outputs)
        total = sum(best.values())
        print(
            f"| {size} | {best['batch']:.2f} | {best['execute']:.2f} | {best['encode']:.2f} "
            f"| {total:.2f} |"
        )


if __name__ == "__main__":
    main()
