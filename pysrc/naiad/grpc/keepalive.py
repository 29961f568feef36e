"""Keepalive PINGs from the server, as tritonserver's --grpc-keepalive-time,
--grpc-keepalive-timeout, --grpc-keepalive-permit-without-calls and
--grpc-http2-max-pings-without-data set them on gRPC core (grpc/protocol.py sends them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keepalive", "keepalive_from"]


@dataclass(frozen=True)
class Keepalive:
    time_ms: int  # a PING this long after the last one (Triton's default 7200000)
    timeout_ms: int = 20000  # its ACK must arrive within this, else the connection closes
    permit_without_calls: bool = False  # also on a connection with no call open
    max_pings_without_data: int = 2  # PINGs in a row with no call activity (0: no limit)


def keepalive_from(options) -> Keepalive | None:
    """The naiad serve flags' keepalive (None without --grpc-keepalive-time: Naiad then
    sends no PINGs; Triton's default sends one every 2 hours while calls are open)."""
    time_ms = getattr(options, "grpc_keepalive_time", None)
    if time_ms is None:
        return None
    return Keepalive(
        time_ms,
        options.grpc_keepalive_timeout,
        options.grpc_keepalive_permit_without_calls,
        options.grpc_http2_max_pings_without_data,
    )
