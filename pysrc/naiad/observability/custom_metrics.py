"""The custom metrics of Python models (pb_utils.MetricFamily and Metric): where their
values live, shared by the model instances and read by the frontend's /metrics.

Triton keeps every family in one registry of the server process: an instance (of any
model) that creates a family of an existing name, and a metric with the same labels,
adds to the same value, and `value()` reads that shared value; the families stay on the
page after their model is unloaded, and a reload carries on from their values. Here each
instance is a process of its own, so the server has one folder (`server_folder()`),
named to every worker (`CUSTOM_METRICS_DIR`):

- `values`: float64 slots, a sparse file of `MAX_SLOTS` that every worker maps;
- `families.json`: the families in the order they were created, each with its kind,
  description and metrics (labels, buckets, first slot);
- `lock`: held (flock, and a thread lock within a process) around every change, so that
  increments from several processes add up and a metric is created once.

A counter or a gauge takes one slot; a histogram takes 2 + len(buckets) + 1: its count,
its sum, then one cumulative count per bucket boundary and one for +Inf. Without a folder
(pb_utils used outside a server: tests, notebooks) the values live in the process alone.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import math
import mmap
import os
import re
import shutil
import struct
import tempfile
import threading
from dataclasses import dataclass, field

__all__ = [
    "CUSTOM_METRICS_DIR",
    "COUNTER",
    "GAUGE",
    "HISTOGRAM",
    "KIND_NAMES",
    "MetricError",
    "MetricStore",
    "FamilySnapshot",
    "read_families",
    "store",
]

# The environment variables a worker reads: the server's folder, and its instance's
# name (Triton's messages name the instance).
CUSTOM_METRICS_DIR = "NAIAD_CUSTOM_METRICS_DIR"
INSTANCE_NAME = "NAIAD_INSTANCE_NAME"

COUNTER, GAUGE, HISTOGRAM = 0, 1, 2  # pb_utils.MetricFamily's kinds (Triton's values)
KIND_NAMES = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}
_TRITON_KIND = {
    COUNTER: "TRITONSERVER_METRIC_KIND_COUNTER",
    GAUGE: "TRITONSERVER_METRIC_KIND_GAUGE",
    HISTOGRAM: "TRITONSERVER_METRIC_KIND_HISTOGRAM",
}

MAX_SLOTS = 1 << 17  # 1 MiB of values for the server; sparse until written
_SLOT = struct.Struct("<d")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


class MetricError(Exception):
    """A refusal, in the words of Triton's python_backend (pb_utils raises it as
    TritonModelException)."""


@dataclass
class FamilySnapshot:
    """A family as /metrics shows it: samples are (suffix, labels, value)."""

    name: str
    description: str
    kind: int
    samples: list[tuple[str, dict, float]] = field(default_factory=list)


def _slots_of(kind: int, buckets) -> int:
    return 2 + len(buckets) + 1 if kind == HISTOGRAM else 1


class MetricStore:
    """The families and values of a server (`path`: its folder; None: this process
    alone). Every method may be called from any thread."""

    def __init__(self, path: str | None, instance_name: str = ""):
        self.path = path
        self.instance_name = instance_name
        self._thread_lock = threading.Lock()
        if path is None:
            self._lock_fd = -1
            self._values = mmap.mmap(-1, MAX_SLOTS * _SLOT.size)
            self._directory: list[dict] = []
            return
        # The folder is the frontend's (server_folder): a worker never creates it.
        self._lock_fd = os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        values_fd = os.open(os.path.join(path, "values"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(values_fd).st_size < MAX_SLOTS * _SLOT.size:
                os.ftruncate(values_fd, MAX_SLOTS * _SLOT.size)
            self._values = mmap.mmap(values_fd, MAX_SLOTS * _SLOT.size)
        finally:
            os.close(values_fd)
        self._directory = []

    # -- locking and the directory -----------------------------------------------------

    @contextlib.contextmanager
    def _locked(self):
        with self._thread_lock:
            if self._lock_fd < 0:
                yield
                return
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _load_directory(self) -> list[dict]:
        if self.path is None:
            return self._directory
        try:
            with open(os.path.join(self.path, "families.json"), "rb") as file:
                return json.loads(file.read() or b"[]")
        except FileNotFoundError:
            return []

    def _save_directory(self, families: list[dict]) -> None:
        if self.path is None:
            self._directory = families
            return
        temporary = os.path.join(self.path, f"families.json.{os.getpid()}")
        with open(temporary, "w") as file:
            json.dump(families, file)
        os.replace(temporary, os.path.join(self.path, "families.json"))

    def _refused(self, what: str, message: str) -> MetricError:
        return MetricError(
            f"{what}: Failed to process the request for model '{self.instance_name}', "
            f"message: {message}"
        )

    # -- creating ----------------------------------------------------------------------

    def family(self, name: str, description: str, kind: int) -> None:
        """Creates the family, or finds the one of that name (of the same kind)."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise self._refused(
                "Error when creating MetricFamily", f"invalid metric family name '{name}'"
            )
        with self._locked():
            families = self._load_directory()
            for existing in families:
                if existing["name"] == name:
                    if existing["kind"] != kind:
                        raise self._refused(
                            "Error when creating MetricFamily",
                            "Family name already exists with different type",
                        )
                    return
            families.append({"name": name, "description": description, "kind": kind, "metrics": []})
            self._save_directory(families)

    def metric(self, family: str, labels: dict, buckets: list[float] | None) -> int:
        """The first slot of the family's metric with these labels (created at 0)."""
        for key, value in labels.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise self._refused(
                    "Error when creating Metric", "attempt to access JSON non-string as string"
                )
            if not _LABEL.match(key):
                raise self._refused("Error when creating Metric", f"invalid label name '{key}'")
        with self._locked():
            families = self._load_directory()
            entry = next(f for f in families if f["name"] == family)
            kind = entry["kind"]
            if kind == HISTOGRAM and buckets is None:
                raise MetricError("Failed to create metric. Missing required buckets.")
            if kind != HISTOGRAM and buckets is not None:
                raise MetricError("Failed to create metric. Unexpected buckets found.")
            if buckets is not None:
                buckets = [float(b) for b in buckets]
                if any(b >= c for b, c in zip(buckets, buckets[1:])):
                    raise self._refused(
                        "Error when creating Metric", "Bucket Boundaries must be strictly sorted"
                    )
            for metric in entry["metrics"]:
                if metric["labels"] == labels:
                    return metric["slot"]
            used = sum(
                _slots_of(f["kind"], m["buckets"] or []) for f in families for m in f["metrics"]
            )
            needed = _slots_of(kind, buckets or [])
            if used + needed > MAX_SLOTS:
                raise self._refused(
                    "Error when creating Metric",
                    f"the model has more than {MAX_SLOTS} custom metric values",
                )
            entry["metrics"].append({"labels": dict(labels), "buckets": buckets, "slot": used})
            self._save_directory(families)
            return used

    # -- values ------------------------------------------------------------------------

    def _read(self, slot: int) -> float:
        return _SLOT.unpack_from(self._values, slot * _SLOT.size)[0]

    def _write(self, slot: int, value: float) -> None:
        _SLOT.pack_into(self._values, slot * _SLOT.size, value)

    def increment(self, kind: int, slot: int, value: float) -> None:
        if kind == HISTOGRAM:
            raise self._refused(
                "Failed to increment metric value",
                f"{_TRITON_KIND[kind]} does not support Increment",
            )
        if kind == COUNTER and value < 0:
            raise self._refused(
                "Failed to increment metric value",
                f"{_TRITON_KIND[kind]} can only be incremented monotonically by non-negative "
                "values.",
            )
        with self._locked():
            self._write(slot, self._read(slot) + value)

    def set(self, kind: int, slot: int, value: float) -> None:
        if kind != GAUGE:
            raise self._refused(
                "Failed to set metric value", f"{_TRITON_KIND[kind]} does not support Set"
            )
        with self._locked():
            self._write(slot, float(value))

    def observe(self, kind: int, slot: int, buckets: list[float] | None, value: float) -> None:
        if kind != HISTOGRAM:
            raise self._refused(
                "Failed to observe metric value", f"{_TRITON_KIND[kind]} does not support Observe"
            )
        with self._locked():
            self._write(slot, self._read(slot) + 1)
            self._write(slot + 1, self._read(slot + 1) + value)
            for index, bound in enumerate([*buckets, math.inf]):
                if value <= bound:
                    self._write(slot + 2 + index, self._read(slot + 2 + index) + 1)

    def value(self, kind: int, slot: int) -> float:
        """A counter's or gauge's value; a histogram's sum."""
        return self._read(slot + 1 if kind == HISTOGRAM else slot)

    # -- reading, for /metrics ---------------------------------------------------------

    def snapshot(self) -> list[FamilySnapshot]:
        with self._locked():
            families = self._load_directory()
            used = sum(
                _slots_of(f["kind"], m["buckets"] or []) for f in families for m in f["metrics"]
            )
            values = bytes(self._values[: used * _SLOT.size])
        return _snapshots(families, values)

    def close(self) -> None:
        with contextlib.suppress(BufferError):
            self._values.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _snapshots(families: list[dict], values: bytes) -> list[FamilySnapshot]:
    def slot(index: int) -> float:
        if (index + 1) * _SLOT.size > len(values):
            return 0.0
        return _SLOT.unpack_from(values, index * _SLOT.size)[0]

    snapshots = []
    for entry in families:
        snapshot = FamilySnapshot(entry["name"], entry["description"], entry["kind"])
        for metric in entry["metrics"]:
            labels, first = metric["labels"], metric["slot"]
            if entry["kind"] != HISTOGRAM:
                snapshot.samples.append(("", labels, slot(first)))
                continue
            # prometheus-cpp's order: _count, _sum, then the buckets.
            snapshot.samples.append(("_count", labels, slot(first)))
            snapshot.samples.append(("_sum", labels, slot(first + 1)))
            for index, bound in enumerate([*metric["buckets"], math.inf]):
                snapshot.samples.append(
                    ("_bucket", {**labels, "le": bound}, slot(first + 2 + index))
                )
        snapshots.append(snapshot)
    return snapshots


def read_families(path: str) -> list[FamilySnapshot]:
    """The families in the folder `path` (none yet: [])."""
    if not os.path.exists(os.path.join(path, "families.json")):
        return []
    reader = MetricStore(path)
    try:
        return reader.snapshot()
    finally:
        reader.close()


# -- the frontend's side: one folder for the server --------------------------------------

_folder: str | None = None
_store_lock = threading.Lock()


def server_folder() -> str:
    """This server's folder (made on first use, removed at exit)."""
    global _folder
    with _store_lock:
        if _folder is None:
            _folder = tempfile.mkdtemp(prefix="naiad-custom-metrics-")
            atexit.register(shutil.rmtree, _folder, True)
        return _folder


# -- the worker's side ------------------------------------------------------------------

_store: MetricStore | None = None


def store() -> MetricStore:
    """This process's store: the server's folder in a worker, else its own."""
    global _store
    with _store_lock:
        if _store is None:
            _store = MetricStore(
                os.environ.get(CUSTOM_METRICS_DIR) or None, os.environ.get(INSTANCE_NAME, "")
            )
        return _store
