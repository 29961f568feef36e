"""Limits on HTTP connections, Naiad's own (Triton 2.51's HTTP server has none of them:
it keeps an idle connection, or one that sends half a request head, open for good, and
takes any number of connections):

- `--http-client-timeout-secs` (default 60): a request's head must arrive whole within
  it, its body may not pause longer, and a client must read its answers at least that
  often; otherwise the connection gets 408 and is closed (a slowloris client holds its
  own socket for that long, nothing more). A connection that sends nothing at all within
  it is closed without a word: silent sockets would hold `--http-max-connections` slots
  for good.
- `--http-idle-timeout-secs` (default 0, none, as Triton): a keep-alive connection with
  nothing in flight is closed after that long.
- `--http-max-connections` (default 0, none, as Triton): a connection past it is
  answered 503 and closed at once.

One sweep a second checks every connection, so a request costs nothing for it but the
connection's note of the current tick when bytes arrive (protocol.data_received): about
25 ns per received chunk (timeit of that statement against an empty method, on the
shared 2-core development machine under load).
"""

from __future__ import annotations

import asyncio

__all__ = ["ConnectionLimits"]

SWEEP_SECONDS = 1.0


class ConnectionLimits:
    def __init__(self, client_timeout: int = 60, idle_timeout: int = 0, max_connections: int = 0):
        self.client_timeout = client_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.tick = 0  # whole seconds since the sweep started
        self.connections: set = set()
        # Sweeps of connections kept elsewhere (http/io_server.py), called with self.
        self.sweeps: list = []
        self._sweep: asyncio.TimerHandle | None = None

    def start(self, loop) -> None:
        if self.client_timeout or self.idle_timeout:
            self._sweep = loop.call_later(SWEEP_SECONDS, self._run, loop)

    def stop(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def admit(self, connection) -> bool:
        """Counts a new connection in; False when it is one too many."""
        if self.max_connections and len(self.connections) >= self.max_connections:
            return False
        self.connections.add(connection)
        return True

    def _run(self, loop) -> None:
        self.tick += 1
        for connection in list(self.connections):
            self._check(connection)
        for sweep in self.sweeps:
            sweep(self)
        self._sweep = loop.call_later(SWEEP_SECONDS, self._run, loop)

    def _check(self, connection) -> None:
        if connection.closed or connection.transport is None:
            return
        in_lane_mode = getattr(connection.transport, "in_lane_mode", None)
        if in_lane_mode is not None and in_lane_mode():
            return  # the C++ I/O loop holds its requests: its own sweep
        now = self.tick
        timeout = self.client_timeout
        if connection.pending:  # the server owes answers: only a client not reading them
            if timeout and connection.writing_paused and now - connection.paused_at > timeout:
                connection.transport.abort()  # it reads nothing, a 408 would not reach it
            return
        if connection.holds_partial_request():
            if not timeout:
                return
            if connection.in_head():
                late = now - connection.begun_at > timeout
            else:
                late = now - connection.last_data > timeout
            if late:
                connection.time_out(timeout)
            return
        if timeout and not connection.received and now - connection.begun_at > timeout:
            connection.transport.close()  # silent since it connected: it holds a slot
            return
        if self.idle_timeout and now - connection.last_data > self.idle_timeout:
            connection.transport.close()
