"""The Python side of one gRPC connection of the C++ I/O loop (grpc/server.py): the
loop runs its HTTP/2 (csrc/http2/grpc_io.cc) and answers the lane's ModelInfer calls
itself; the events of every other call come here and become calls of the Service, and
their answers go back through the loop (`_core.GrpcStreams`).

It also keeps the connection's timers: keepalive PINGs, the maximum connection age and
the client ping policy. They are per connection, seconds to hours apart, and cost
nothing per call here; the loop reports the client's PINGs (on_pings) only when a policy
is set.

Runs on the event loop thread only (as the C++ connection requires). Backpressure is
the loop's: it stops reading a connection whose client does not read its answers.
"""

from __future__ import annotations

import logging
from collections import deque

from naiad import _core
from naiad.flags.restrictions import GRPC_CATEGORIES, Restrictions, add_forwarded
from naiad.grpc import decoupled, status
from naiad.grpc.keepalive import IDLE_PING_INTERVAL_MS, Keepalive, PingPolicy
from naiad.grpc.service import (
    MODEL_INFER,
    STREAM_INFER,
    InferFinisher,
    Service,
    error_of,
    parse,
)
from naiad.grpc.status import GrpcError
from naiad.grpc.tensors import to_infer_request
from naiad.inflate import inflate_soon
from naiad.protos import grpc_service_pb2 as pb

log = logging.getLogger("naiad.grpc")

MAX_MESSAGE_SIZE = 0x7FFFFFFF  # Triton accepts messages up to 2 GB
_DEADLINE_MESSAGE = "Deadline Exceeded"


def inflate_message(data, encoding: str, limit: int = MAX_MESSAGE_SIZE) -> bytearray:
    """A compressed gRPC message's bytes, inflated as the C++ I/O loop inflates the
    messages it holds (csrc/http2/grpc_inflate.h: Triton's statuses and messages)."""
    code, value = _core.grpc_inflate(data, encoding, limit)
    if code != status.OK:
        raise GrpcError(code, value)
    return value


class _Call:
    __slots__ = (
        "path",
        "encoding",
        "message",
        "timer",
        "in_flight",
        "half_closed",
        "forwarded",
        "trace_context",
        "inflating",
    )

    def __init__(self, path: str, encoding: str):
        self.path = path
        self.encoding = encoding
        self.message = None  # the request message of a unary call
        self.timer = None  # deadline handle
        self.in_flight = 0  # streamed requests not answered (finally) yet
        self.half_closed = False
        self.forwarded = None  # metadata for the model (--grpc-header-forward-pattern)
        self.trace_context = None  # (traceparent, tracestate), trace mode opentelemetry
        # While a compressed message inflates off the loop: the call's later events,
        # (message, compressed) pairs and None for the half-close, taken in order after it.
        self.inflating: deque | None = None


class GrpcProtocol:
    def __init__(
        self,
        service: Service,
        loop,
        engine,
        connection: int,
        arrivals=None,
        max_age=(None, None),
        keepalive: Keepalive | None = None,
        ping_policy: PingPolicy | None = None,
    ):
        self.service = service
        # --grpc-keepalive-*: our PINGs, and the timers that send them and wait for ACKs.
        self._keepalive = keepalive
        self._keepalive_timer = None
        self._ack_timer = None
        self._pings_without_data = 0
        self._activity = 0  # the connection's gRPC events when the last PING went out
        # --grpc-http2-*-ping-*: the client's PINGs counted, the last one's time and
        # the strikes since the server last sent data or headers.
        self._ping_policy = ping_policy
        self._pings_seen = 0
        self._last_ping = None
        self._ping_strikes = 0
        # --grpc-max-connection-age and its grace, in ms (None: no limit): GOAWAY once
        # the connection is that old, then close it that much later with calls still open.
        self._max_age_ms, self._age_grace_ms = max_age
        self._age_timer = None
        self.loop = loop
        self.arrivals = arrivals
        self.engine = engine
        self.connection = connection
        self.conn = engine.io.grpc_streams(connection)
        # Restricted protocols and header forwarding read call metadata; without them
        # the loop does not hand it out (naiad/flags/restrictions.py).
        self._restrictions = service.restrictions
        self._forward = service.forward
        self.calls: dict[int, _Call] = {}
        # The core's ids of each call's requests in flight (ModelStreamInfer requests,
        # fast-path ModelInfer calls), cancelled in the core when the client resets the
        # call or the connection ends (grpc/decoupled.py cancel_stream).
        self.stream_requests: dict[int, set] = {}
        # General-path ModelInfer calls in flight: their futures, cancelled on a reset.
        self.infer_futures: dict[int, object] = {}
        # The batcher's hint (scheduling/arrivals.py): inference calls in flight and the
        # most there ever were at once on this connection.
        self._counted = False
        self._in_flight = 0
        self._high_water = 0
        self._waiting = False
        self._closed = False

    # -- the connection, as the loop reports it --------------------------------------
    def start(self) -> None:
        if self._max_age_ms is not None:
            self._age_timer = self.loop.call_later(self._max_age_ms / 1000, self._aged)
        if self._keepalive is not None:
            self._keepalive_timer = self.loop.call_later(
                self._keepalive.time_ms / 1000, self._send_keepalive
            )

    def connection_lost(self, exc) -> None:
        self._closed = True
        for timer in (self._age_timer, self._keepalive_timer, self._ack_timer):
            if timer is not None:
                timer.cancel()
        for call in self.calls.values():
            if call.timer is not None:
                call.timer.cancel()
        self.calls.clear()
        for stream in list(self.stream_requests):
            decoupled.cancel_stream(self, stream)
        for future in self.infer_futures.values():
            future.cancel()
        self.infer_futures.clear()
        if self._counted:
            self.arrivals.open -= 1
            if self._waiting:
                self.arrivals.waiting -= 1
            self._counted = False
            self._waiting = False

    def on_event(self, event) -> None:
        """One event of a call of Python's (the _core.GrpcEvent of an IO_GRPC_CALL event)."""
        kind = event.kind
        stream = event.stream_id
        try:
            if kind == _core.GRPC_MESSAGE:
                self._on_message(stream, event.message, event.compressed)
            elif kind == _core.GRPC_CALL:
                forwarded = None
                if event.metadata is not None:  # restrictions, forwarding
                    forwarded = self._admit(stream, event.path, event.metadata)
                    if forwarded is False:
                        return
                self._on_call(
                    stream,
                    event.path,
                    event.timeout_us,
                    event.encoding,
                    event.trace_context,
                    forwarded,
                )
            elif kind == _core.GRPC_HALF_CLOSE:
                self._on_half_close(stream)
            else:
                self._on_reset(stream, event.code)
        except Exception as exc:  # a call's failure never takes the connection down
            self._fail(stream, exc)

    def on_pings(self, received: int, answered: bool) -> None:
        """The client sent PINGs (`received` in all); `answered`: calls were answered
        since the last report (gRPC core's ping policy starts over when we send)."""
        if answered:
            self._last_ping = None
            self._ping_strikes = 0
        if self._ping_policy is not None:
            self._police_pings(received)

    def answer_adopted(self, stream: int, payload, exc) -> None:
        """The answer to a lane call the loop took, which Python answers (its completion
        was left to Python)."""
        if exc is not None:
            self._fail(stream, exc)
        else:
            self._answer(stream, payload)
        self._flush()

    # -- output ----------------------------------------------------------------------
    def _flush(self) -> None:
        # Answers made in one loop iteration go out in one write (the loop closes the
        # connection once the protocol is done or failed).
        self.engine.flush_soon()

    _schedule_flush = _flush

    def shutdown(self) -> None:
        """GOAWAY: open calls are answered, new ones refused; closes once all are done."""
        self.conn.shutdown()
        self._flush()

    def close(self) -> None:
        if not self._closed:
            self.engine.close(self.engine.grpc, self.connection, True)

    def _police_pings(self, received: int) -> bool:
        """The client's new PINGs against the ping policy; True when they were too many
        (GOAWAY sent, the connection closing)."""
        policy = self._ping_policy
        now = self.loop.time()
        interval_ms = (
            policy.min_interval_ms
            if self.conn.open_streams or policy.permit_without_calls
            else IDLE_PING_INTERVAL_MS
        )
        for _ in range(received - self._pings_seen):
            if self._last_ping is not None and now < self._last_ping + interval_ms / 1000:
                self._ping_strikes += 1
            self._last_ping = now
        self._pings_seen = received
        if policy.max_strikes and self._ping_strikes > policy.max_strikes:
            log.info("gRPC connection closed: too many PINGs from the client")
            self.conn.too_many_pings()
            self._flush()
            return True
        return False

    def _send_keepalive(self) -> None:
        """--grpc-keepalive-time elapsed: a PING, when calls are open or
        --grpc-keepalive-permit-without-calls allows it, and fewer than
        --grpc-http2-max-pings-without-data went out since the last call activity (0:
        no limit). Its ACK must come within --grpc-keepalive-timeout, else the connection
        is closed."""
        keepalive = self._keepalive
        self._keepalive_timer = None
        if self._closed:
            return
        limit = keepalive.max_pings_without_data
        activity = self.conn.activity
        if activity != self._activity:  # calls are active
            self._activity = activity
            self._pings_without_data = 0
        # One PING out at a time: its ACK timer is the one that counts.
        if (
            not self.conn.pings_unacked
            and (self.conn.open_streams or keepalive.permit_without_calls)
            and (limit == 0 or self._pings_without_data < limit)
        ):
            self.conn.ping()
            self._pings_without_data += 1
            self._flush()
            if self._ack_timer is not None:
                self._ack_timer.cancel()
            self._ack_timer = self.loop.call_later(keepalive.timeout_ms / 1000, self._check_ack)
        self._keepalive_timer = self.loop.call_later(keepalive.time_ms / 1000, self._send_keepalive)

    def _check_ack(self) -> None:
        self._ack_timer = None
        if not self._closed and self.conn.pings_unacked:
            log.info("gRPC connection closed: keepalive PING not acknowledged in time")
            self.close()

    def _aged(self) -> None:
        """--grpc-max-connection-age reached: GOAWAY (the client opens a new connection
        for its next calls); past the grace, the calls still open end with it."""
        self._age_timer = None
        if self._closed:
            return
        self.shutdown()
        if self._age_grace_ms is not None and not self._closed:
            self._age_timer = self.loop.call_later(self._age_grace_ms / 1000, self.close)

    # -- calls -----------------------------------------------------------------------
    def _admit(self, stream: int, path: str, metadata: tuple):
        """A call's metadata: False when refused (UNAVAILABLE, Triton's message: a
        restricted protocol without its key and value), else the (name, value) pairs an
        inference call forwards to the model (None when none)."""
        category = GRPC_CATEGORIES.get(path)
        rule = self._restrictions.rule(category) if category else None
        if rule is not None and (rule[0], rule[1]) not in metadata:
            self.conn.finish(stream, status.UNAVAILABLE, Restrictions.grpc_denial(rule[0]))
            return False
        forward = self._forward
        if forward is None or category != "inference":
            return None
        return [(name, value) for name, value in metadata if forward.search(name)] or None

    def _on_call(
        self, stream: int, path: str, timeout_us: int, encoding: str, trace_context, forwarded=None
    ) -> None:
        if path != STREAM_INFER and path not in self.service.unary:
            self.conn.finish(stream, status.UNIMPLEMENTED, "")  # grpc++ says nothing more
            return
        call = _Call(path, encoding)
        call.forwarded = forwarded
        call.trace_context = trace_context
        self.calls[stream] = call
        if timeout_us >= 0:
            call.timer = self.loop.call_later(timeout_us / 1e6, self._expire, stream)
        if not self._counted and self.arrivals is not None and path.endswith("Infer"):
            self.arrivals.open += 1
            self._counted = True

    def _on_message(self, stream: int, data, compressed: bool) -> None:
        call = self.calls.get(stream)
        if call is None:
            return
        if call.inflating is not None:  # behind a message still inflating: in order
            call.inflating.append((data, compressed))
        elif compressed:
            call.inflating = deque()
            self._inflate(stream, call, data)
        else:
            self._take_message(stream, call, data)

    def _take_message(self, stream: int, call: _Call, data) -> None:
        if call.path != MODEL_INFER and call.path != STREAM_INFER:
            data = bytes(data)  # the control plane's parsers want bytes; the infer lane not
        if call.path == STREAM_INFER:
            self._stream_request(stream, call, data)
        elif call.message is not None:
            raise GrpcError(status.UNIMPLEMENTED, "more than one request message on a unary call")
        else:
            call.message = data

    def _inflate(self, stream: int, call: _Call, data) -> None:
        """Inflates a compressed message on the loop's executor (a small message may
        inflate to gigabytes: the loop serves the other connections meanwhile), then
        takes it and the call's events that came behind it, in order."""
        future = inflate_soon(self.loop, inflate_message, data, call.encoding)
        future.add_done_callback(lambda f: self._inflated(stream, call, f))

    def _inflated(self, stream: int, call: _Call, future) -> None:
        if self._closed or self.calls.get(stream) is not call:
            return  # reset, expired or failed meanwhile
        try:
            self._take_message(stream, call, future.result())
            backlog = call.inflating
            while backlog and self.calls.get(stream) is call:
                data, compressed = backlog.popleft()
                if compressed:
                    self._inflate(stream, call, data)
                    break
                if data is None:
                    call.inflating = None
                    self._on_half_close(stream)
                else:
                    self._take_message(stream, call, data)
            else:
                call.inflating = None
        except Exception as exc:
            self._fail(stream, exc)
        self._flush()

    def _on_half_close(self, stream: int) -> None:
        call = self.calls.get(stream)
        if call is None:
            return
        if call.inflating is not None:  # after the messages still inflating
            call.inflating.append((None, False))
            return
        call.half_closed = True
        if call.path == STREAM_INFER:
            if call.in_flight == 0:
                self._finish(stream, status.OK, "")
            return
        if call.message is None:
            raise GrpcError(status.UNIMPLEMENTED, "no request message on a unary call")
        forwarded = call.forwarded  # parameters the C++ path does not add: the general path
        traced = call.trace_context is not None  # the general path reads it (tracing/otel.py)
        if (
            call.path == MODEL_INFER
            and not forwarded
            and not traced
            and self._submit_fast(stream, call.message)
        ):
            return
        message_class, handler = self.service.unary[call.path]
        message = call.message if type(call.message) is bytes else bytes(call.message)
        request = message if message_class is None else parse(message_class, message)
        if call.path == MODEL_INFER and (forwarded or traced):
            result = self.service.model_infer(request, forwarded, call.trace_context)
        else:
            result = handler(request)
        if type(result) is tuple:  # (future, finish): an inference or a load in flight
            future, finish = result
            infer = call.path == MODEL_INFER
            if infer:
                self._track(1)
                self.infer_futures[stream] = future  # cancelled if the call is reset
            future.add_done_callback(lambda f: self._call_done(stream, f, finish, infer))
            return
        self._answer(stream, result)

    def _submit_fast(self, stream: int, message: bytes) -> bool:
        """The C++ fast path (csrc/http2/grpc_lane.h): raw or typed contents, from message
        bytes to response bytes without Python per tensor. False: the general path's."""
        self._track(1)
        request_id = self.service.manager.submit_grpc(
            message, lambda payload, exc: self._fast_done(stream, payload, exc)
        )
        if request_id is None:
            self._track(-1)
            return False
        if request_id and stream in self.calls:  # queued: a reset cancels it in the core
            self.stream_requests[stream] = {request_id}
        return True

    def _fast_done(self, stream: int, payload, exc) -> None:
        self._track(-1)
        self.stream_requests.pop(stream, None)
        if stream not in self.calls:
            return  # cancelled or past its deadline
        if exc is not None:
            self._fail(stream, exc)
        else:
            self._answer(stream, payload)
        self._schedule_flush()

    def _track(self, delta: int) -> None:
        self._in_flight += delta
        if self._in_flight > self._high_water:
            self._high_water = self._in_flight
        waiting = self._in_flight > 0 and self._in_flight >= self._high_water
        if self._counted and waiting != self._waiting:
            self._waiting = waiting
            self.arrivals.waiting += 1 if waiting else -1

    def _call_done(self, stream: int, future, finish, infer: bool) -> None:
        if infer:
            self._track(-1)
            self.infer_futures.pop(stream, None)
        if stream not in self.calls:
            return  # cancelled or past its deadline
        try:
            response = finish(future)
        except BaseException as exc:
            self._fail(stream, exc)
        else:
            self._answer(stream, response)
        self._schedule_flush()

    def _answer(self, stream: int, response) -> None:
        kind = type(response)
        if kind is bytes:
            self.conn.send_message(stream, response)
        elif kind is _core.GrpcAnswer:  # a large answer, written from its result block
            response.send(self.conn, stream)
        else:
            self.conn.send_message(stream, response.SerializeToString())
        self._finish(stream, status.OK, "")

    def _fail(self, stream: int, exc: BaseException) -> None:
        code, message = error_of(exc)
        self._finish(stream, code, message)

    def _finish(self, stream: int, code: int, message: str) -> None:
        self._last_ping = None  # gRPC core's ping policy starts over: we send headers
        self._ping_strikes = 0
        call = self.calls.pop(stream, None)
        if call is not None and call.timer is not None:
            call.timer.cancel()
        self.conn.finish(stream, code, message)

    def _on_reset(self, stream: int, code: int) -> None:
        """The client reset the call (RST_STREAM), or the connection answered it early
        (a stream error): nothing more is sent on it, and its requests in flight are
        cancelled in the core (dropped if queued, `is_cancelled()` if running)."""
        self._drop(stream)

    def _drop(self, stream: int) -> None:
        call = self.calls.pop(stream, None)
        if call is not None and call.timer is not None:
            call.timer.cancel()
        if stream in self.stream_requests:  # the client reset the stream
            decoupled.cancel_stream(self, stream)
        future = self.infer_futures.pop(stream, None)
        if future is not None:  # a ModelInfer call of the general path: the manager
            future.cancel()  # cancels its request in the core

    def _expire(self, stream: int) -> None:
        if stream in self.calls:
            self._finish(stream, status.DEADLINE_EXCEEDED, _DEADLINE_MESSAGE)
            self._flush()
        if stream in self.stream_requests:  # its decoupled requests answer nobody now
            decoupled.cancel_stream(self, stream)

    # -- ModelStreamInfer: many requests on one stream, each answered on its own -------
    def _stream_request(self, stream: int, call: _Call, data) -> None:
        if not call.forwarded and self._stream_fast(stream, call, data):
            return
        request_id = ""
        try:
            message = parse(pb.ModelInferRequest, bytes(data))
            request_id = message.id
            request = to_infer_request(message)
            if call.forwarded:
                add_forwarded(request, call.forwarded)
            model = self.service.manager.get(request.model_name, request.model_version)
            if getattr(model, "decoupled", False):  # 0..N responses (grpc/decoupled.py)
                decoupled.submit_stream(self, stream, call, model, request)
                call.in_flight += 1
                self._track(1)
                return
            future = model.submit(request)
        except Exception as exc:
            self._stream_error(stream, request_id, exc)
            return
        call.in_flight += 1
        self._track(1)
        finish = InferFinisher(model, request)
        future.add_done_callback(lambda f: self._stream_done(stream, f, finish))

    def _stream_fast(self, stream: int, call: _Call, data) -> bool:
        """A streamed request through the C++ fast path (raw or typed contents), answered with
        ModelStreamInferResponse bytes built in C++ from the result block, response by
        response: `final` False for those before the request's last (a decoupled
        model's), which leave the request in flight. False: the general path's."""
        call.in_flight += 1  # before: a refusal is answered inside submit_grpc
        self._track(1)
        queued = [0]  # the core's id, once known (a refusal answers before it is)
        try:
            request_id = self.service.manager.submit_grpc(
                data,
                lambda payload, exc, final=True: self._stream_fast_done(
                    stream, data, payload, exc, final, queued[0]
                ),
                stream=True,
            )
        except Exception:  # the general path answers it (with the error, if any)
            log.exception("the gRPC fast path failed on a streamed request")
            request_id = None
        if request_id is None:
            call.in_flight -= 1
            self._track(-1)
            return False
        if request_id:  # queued: a reset of the stream cancels it in the core
            queued[0] = request_id
            self.stream_requests.setdefault(stream, set()).add(request_id)
        return True

    def _stream_fast_done(
        self, stream: int, data, payload, exc, final: bool, request_id: int
    ) -> None:
        if final:
            self._track(-1)
            ids = self.stream_requests.get(stream)
            if ids is not None:
                ids.discard(request_id)
        call = self.calls.get(stream)
        if call is None:
            return  # reset by the client, or past its deadline
        if exc is not None:
            self._stream_error(stream, _core.grpc_request_id(data), exc)
        elif type(payload) is bytes:
            self.conn.send_message(stream, payload)
        else:  # a large answer, written from its result block
            payload.send(self.conn, stream)
        if final:
            call.in_flight -= 1
            if call.half_closed and call.in_flight == 0:
                self._finish(stream, status.OK, "")
        self._schedule_flush()

    def _stream_done(self, stream: int, future, finish) -> None:
        self._track(-1)
        call = self.calls.get(stream)
        if call is None:
            return
        call.in_flight -= 1
        try:
            response = finish(future)
        except BaseException as exc:
            self._stream_error(stream, finish.request.id, exc)
        else:
            # One response, the request's last: Triton marks it so on a stream.
            response.parameters[decoupled.FINAL_PARAMETER].bool_param = True
            self.conn.send_message(
                stream, pb.ModelStreamInferResponse(infer_response=response).SerializeToString()
            )
        if call.half_closed and call.in_flight == 0:
            self._finish(stream, status.OK, "")
        self._schedule_flush()

    def stream_request_done(self, stream: int) -> None:
        """A decoupled request of `stream` had its final response: the stream ends once
        the client half-closed and nothing is in flight."""
        self._track(-1)
        call = self.calls.get(stream)
        if call is None:
            return
        call.in_flight -= 1
        if call.half_closed and call.in_flight == 0:
            self._finish(stream, status.OK, "")
        self._schedule_flush()

    def _stream_error(self, stream: int, request_id: str, exc: BaseException) -> None:
        # The stream stays open: the error is this request's answer (as Triton does).
        _, message = error_of(exc)
        response = pb.ModelStreamInferResponse(error_message=message)
        response.infer_response.id = request_id
        self.conn.send_message(stream, response.SerializeToString())
