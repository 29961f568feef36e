"""The JSON trace file of trace mode `triton`, written as Triton 2.51 writes it.

Without log_frequency, traces are appended to `trace_file` as one JSON array that is
closed (`]`) when the server stops. With log_frequency N, each N traces go to a file of
their own, `trace_file.0`, `trace_file.1`, ..., each a complete JSON array.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("naiad")


class TraceFile:
    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._file = None
        self._next_index = 0

    def save(self, traces: list[bytes], indexed: bool) -> None:
        """`traces`: each a trace's records, comma-separated JSON objects."""
        body = b",".join(traces)
        try:
            with self._lock:
                if indexed:
                    name = f"{self.path}.{self._next_index}"
                    self._next_index += 1
                    with open(name, "wb") as chunk:
                        chunk.write(b"[" + body + b"]")
                    return
                if self._file is None:
                    self._file = open(self.path, "wb")  # noqa: SIM115 (open until close())
                    self._file.write(b"[")
                else:
                    self._file.write(b",")
                self._file.write(body)
                self._file.flush()
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.write(b"]")
                self._file.close()
                self._file = None
