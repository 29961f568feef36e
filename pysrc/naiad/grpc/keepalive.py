"""Keepalive PINGs from the server, as tritonserver's --grpc-keepalive-time,
--grpc-keepalive-timeout, --grpc-keepalive-permit-without-calls and
--grpc-http2-max-pings-without-data set them on gRPC core (grpc/protocol.py sends them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keepalive", "PingPolicy", "keepalive_from", "ping_policy_from"]


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


@dataclass(frozen=True)
class PingPolicy:
    """What the server allows of the client's PINGs, as gRPC core's ping abuse policy
    (--grpc-http2-min-recv-ping-interval-without-data, --grpc-http2-max-ping-strikes):
    a PING sooner than `min_interval_ms` after the previous one, while the server sent
    no data or headers since, is a strike (with no call open and without
    `permit_without_calls` the interval is two hours); past `max_strikes` (0: no limit)
    the connection gets GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings")."""

    min_interval_ms: int = 300000
    max_strikes: int = 2
    permit_without_calls: bool = False


# gRPC core's interval between a client's PINGs on a connection with no call open
# (when the server does not permit keepalive without calls).
IDLE_PING_INTERVAL_MS = 2 * 60 * 60 * 1000


def ping_policy_from(options) -> PingPolicy | None:
    """The naiad serve flags' ping policy: None (every PING answered, none counted)
    unless --grpc-http2-min-recv-ping-interval-without-data or
    --grpc-http2-max-ping-strikes is given; Triton's gRPC core enforces its defaults
    (300000 ms, 2 strikes) always."""
    interval = getattr(options, "grpc_http2_min_recv_ping_interval_without_data", None)
    strikes = getattr(options, "grpc_http2_max_ping_strikes", None)
    if interval is None and strikes is None:
        return None
    return PingPolicy(
        PingPolicy.min_interval_ms if interval is None else interval,
        PingPolicy.max_strikes if strikes is None else strikes,
        options.grpc_keepalive_permit_without_calls,
    )
