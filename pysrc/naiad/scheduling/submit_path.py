"""The submit path: every way a request enters the core from the front ends.

Owns the four submits (the general path's `submit` of a parsed InferRequest, the HTTP
lane's `take_http_requests` and `submit_fast`, the gRPC lane's `submit_grpc`), the
client's `cancel`, the count of requests each path took (`lane_stats`), and the one
`core.flush` per loop turn that dispatches what the turn queued. Called only on the
event loop; the core takes its own lock inside each call, so there is none here. A
queued request goes into the requests in flight until the CompletionRouter answers it.
"""

from __future__ import annotations

from functools import partial

import orjson

from naiad import _core, outcome_record
from naiad.errors import InvalidArgument, Unavailable, Unsupported, error_of_kind
from naiad.memory.shm import block_regions as shm_block_regions
from naiad.memory.shm import bypasses_cache as shm_bypasses_cache
from naiad.scheduling.completions import infer_response, not_ready_message
from naiad.scheduling.in_flight import GRPC_STREAM, GRPC_UNARY, GeneralPending, LanePending
from naiad.scheduling.model import LoadedModel
from naiad.scheduling.streaming import StreamPending
from naiad.sequence_parameters import refusal as sequence_refusal
from naiad.tracing import tracer as tracer_protocol
from naiad.validation import log_prefix


class SubmitPath:
    def __init__(self, core, lane, grpc_lane, in_flight, table, traces, io_link, arrivals):
        self.core = core
        self.lane = lane  # _core.FastLane: the HTTP lane and the response cache
        self.grpc_lane = grpc_lane  # _core.GrpcLane: the gRPC lane
        self.in_flight = in_flight  # scheduling/in_flight.py: where a queued request waits
        self.table = table  # scheduling/model_table.py: each lane_model's model
        self.traces = traces  # scheduling/request_traces.py: sampling at submit
        self.io_link = io_link  # the C++ I/O loop, which counts the requests it takes
        self.arrivals = arrivals  # scheduling/arrivals.py: for the turn's flush
        self.loop = None  # the event loop, once the server runs (ModelManager.load_all)
        self._flush_scheduled = False
        # Requests queued through the fast lane and through the general path (the HTTP
        # I/O loop counts the lane requests it takes itself: lane_stats adds them).
        self.lane_requests = 0
        self.general_requests = 0
        self.lane_refused = 0  # invalid requests the lane answered with the validator's error
        self.lane_cached = 0  # requests the lanes answered from the response cache
        # Lane requests the HTTP protocol collected from several reads into one buffer
        # first (http/protocol.py): one more host copy of their bytes.
        self.lane_collected = 0

    def submit(
        self,
        model: LoadedModel,
        spec,
        request,
        priority: int = 0,
        timeout_us: int = 0,
        sequence: tuple | None = None,
        on_response=None,
    ):
        """Validates `request` (an InferRequest the general path parsed) with the one
        validator, lays out its block as the lane does and queues it (spec.submit);
        returns the future of its InferResponse. With `on_response`, each of its
        responses goes there instead (scheduling/streaming.py) and the core's request id
        is returned (for `cancel`). Raises NaiadError when it is invalid or cannot be
        queued."""
        request_id = self.core.new_request_id()
        submit_ns = _core.now_ns()
        regions = shm_block_regions(request)
        cache = None
        if (
            model.response_cache
            and sequence is None
            and on_response is None
            and not shm_bypasses_cache(regions)
        ):
            # Outputs in client regions and CUDA inputs bypass it, and requests whose
            # responses go to a consumer (decoupled models', the generate extension's).
            looked = self.lane.cache_lookup(
                model.lane_model, request.id, request.inputs, request.outputs, submit_ns
            )
            if looked.error is not None:
                raise InvalidArgument(looked.error)
            if looked.hit:  # answered now, counted in C++
                future = self.loop.create_future()
                outcome = outcome_record.read(looked.outcome)
                future.set_result(infer_response(model, request.id, outcome, looked.tensors))
                return future
            if looked.looked_up:
                cache = looked
        parameters = orjson.dumps(request.parameters) if request.parameters else b"{}"
        sample = self.traces.sample_general(model, request)
        result = spec.submit(
            self.core,
            model.core_model,
            request_id,
            request.id,
            request.inputs,
            request.outputs,
            parameters,
            priority,
            timeout_us,
            sequence,
            regions=regions,
            traced=sample is not None,
            trace_tensors=sample is not None and sample.tensors,
            trace_parent=sample.parent if sample is not None else None,
            trace_state=sample.state if sample is not None else None,
        )
        if type(result) is str:
            raise InvalidArgument(result)
        code, batch_size, size = result
        if code != _core.SUBMIT_OK:
            if sequence is not None:
                refused = sequence_refusal(code, model.name, sequence)
                if refused is not None:
                    raise refused
            if code == _core.SUBMIT_QUEUE_FULL:
                # Triton words it so and, unlike a queue timeout, counts no failure.
                raise Unavailable(f"{log_prefix(request.id)}Exceeds maximum queue size")
            if code == _core.SUBMIT_MODEL_GONE:
                raise Unavailable(not_ready_message(model))
            model.stats.record_failure(_core.now_ns() - submit_ns, "REJECTED")
            if code == _core.SUBMIT_UNSUPPORTED_INPUT:
                raise Unsupported(
                    f"model '{model.name}': an input's shared-memory region cannot be read"
                )
            raise Unavailable(
                f"model '{model.name}': the shared-memory arena has no room for a request "
                f"of {size} bytes"
            )
        self.general_requests += 1
        self.schedule_flush()
        if sample is not None:
            self.traces.start_general(sample, model, request, request_id, submit_ns)
        if on_response is not None:
            self.in_flight[request_id] = StreamPending(
                request_id, model, request, batch_size, submit_ns, on_response
            )
            return request_id
        future = self.loop.create_future()
        self.in_flight[request_id] = GeneralPending(
            request_id, model, future, request, batch_size, submit_ns, cache
        )
        future.add_done_callback(partial(self._future_done, request_id))
        return future

    def _future_done(self, request_id: int, future) -> None:
        """A front end cancelled the future of request `request_id` (its client went
        away): the core drops or flags the request."""
        if future.cancelled():
            self.cancel(request_id)

    def cancel(self, request_id: int) -> None:
        """The client of request `request_id` went away (a cancelled gRPC call or
        stream, a closed HTTP connection): a queued request is dropped (answered
        CANCELLED), a running one sees `request.is_cancelled()`."""
        if request_id in self.in_flight:
            self.core.cancel(request_id)

    def submit_fast(
        self,
        url: bytes,
        body: bytes,
        header_length: int | None,
        new_on_done,
        encoding: int = 0,
        content_encoding: str | None = None,
        max_body: int | None = None,
    ) -> bool:
        """Queues an infer body the HTTP parser put together through the fast lane, if
        `url` is one of the lane's infer URLs and the lane takes the body. False leaves
        the request to the general path. `header_length`: Inference-Header-Content-Length
        (None: the body is JSON); `new_on_done` as in take_http_requests; `encoding`
        (_core.response_encoding of its Accept-Encoding) compresses the answer;
        `content_encoding`: the body's, which the lane inflates up to `max_body` bytes."""
        submit_ns = _core.now_ns()
        taken = self.lane.submit_to(
            url, body, header_length, submit_ns, encoding, content_encoding, max_body
        )
        if taken is None:
            return False
        self._track_lane([taken], submit_ns, new_on_done)
        return True

    def submit_grpc(self, message, on_done, stream: bool = False) -> int | None:
        """Queues a serialized ModelInferRequest through the gRPC fast path if it takes
        it; None leaves it to the general path. Otherwise returns the core's request id
        (for `cancel` when the client resets the call), or 0 for a request refused at
        once. `on_done(response, None)` gets the ModelInferResponse (bytes, or a
        _core.GrpcAnswer to send from the result block), `on_done(None, exc)` the error
        (the validator's at once). With `stream` (a ModelStreamInfer request) the
        response is a ModelStreamInferResponse, and each response before the last comes
        as `on_done(response, None, False)`."""
        submit_ns = _core.now_ns()
        taken = self.grpc_lane.submit(message, submit_ns, stream)
        if taken is None:
            return None
        if not taken.request_id:
            if taken.reply is not None:  # a response cache hit: its response
                self.lane_cached += 1
                on_done(taken.reply, None)
                return 0
            self.lane_refused += 1
            on_done(None, error_of_kind(taken.error_kind, taken.error_message))
            return 0
        self.in_flight[taken.request_id] = LanePending(
            self.lane,
            self.table.lane_models[taken.lane_model],
            taken.request_id,
            taken.batch_size,
            submit_ns,
            on_done,
            GRPC_STREAM if stream else GRPC_UNARY,
        )
        self.lane_requests += 1
        self.schedule_flush()
        if self.traces.active:
            self.traces.start_lane_traces(submit_ns, tracer_protocol.GRPC)
        return taken.request_id

    def take_http_requests(self, data: bytes, max_body: int, new_on_done, max_requests) -> int:
        """Queues the plain infer requests at the start of received HTTP bytes through
        the fast lane, at most `max_requests`; returns how many bytes they took (the rest
        is for the HTTP parser). Once per request taken, in order: `new_on_done(request_id)`
        for a queued one (the core's id, for `cancel`) returns the callback its answer
        goes to: `on_done(http_bytes, None)` gets the complete response, `on_done(None,
        exc)` the error of a request that never ran; `new_on_done(0, http_bytes)` gives
        the complete response of one the lane answered at once (a cache hit, a refusal)."""
        submit_ns = _core.now_ns()
        consumed, taken = self.lane.take_http(data, max_body, submit_ns, max_requests)
        if taken:
            if type(data) is bytearray:  # one request the protocol collected
                self.lane_collected += len(taken)
            self._track_lane(taken, submit_ns, new_on_done)
        return consumed

    def _track_lane(self, taken: list, submit_ns: int, new_on_done) -> None:
        """Keeps the lane's newly queued requests ([_core.LaneTaken]) until they are
        answered; answers at once those the validator refused and the response cache hits
        (their `reply`: the whole response)."""
        models = self.table.lane_models
        pendings = self.in_flight
        queued = 0
        for one in taken:
            if one.reply is not None:  # refused (batch size 0) or a response cache hit
                new_on_done(0, one.reply)  # answered at once, by the caller
                if one.batch_size:
                    self.lane_cached += 1
                else:
                    self.lane_refused += 1
                continue
            pendings[one.request_id] = LanePending(
                self.lane,
                models[one.lane_model],
                one.request_id,
                one.batch_size,
                submit_ns,
                new_on_done(one.request_id),
            )
            queued += 1
        if queued:
            self.lane_requests += queued
            self.schedule_flush()
            if self.traces.active:
                self.traces.start_lane_traces(submit_ns, tracer_protocol.HTTP)

    def schedule_flush(self) -> None:
        """Dispatches once the requests of this loop turn are all queued."""
        if not self._flush_scheduled:
            # Dispatch once the requests of this loop turn are all queued.
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.core.flush(self.arrivals.possible())

    def lane_stats(self) -> dict:
        """How many requests took the fast lane and how many the general path."""
        # The HTTP I/O loop counts its own (its turns hand Python no counts).
        io = self.io_link.io
        return {
            "lane_requests": self.lane_requests + (io.requests_queued if io else 0),
            "general_requests": self.general_requests,
            # Of lane_requests, those the I/O loop queued itself, with no Python per request.
            "io_loop_requests": io.requests_queued if io else 0,
            "lane_refused": self.lane_refused + (io.requests_refused if io else 0),
            "lane_cached": self.lane_cached + (io.requests_cached if io else 0),
            "lane_collected": self.lane_collected,
            "lane_in_flight": self.lane.in_flight(),
            # Connections that sent an inference request and are still open, as the
            # batcher's early exit counts them (scheduling/arrivals.py).
            "inference_connections": self.arrivals.open + (io.open_count if io else 0),
            # Binary tensor bytes of the I/O loop's answers sent from their response
            # block, and copied on the way (TLS, small tensors...: csrc/http1/http_io.h).
            "out_tensor_bytes_in_place": io.out_tensor_bytes_in_place if io else 0,
            "out_tensor_bytes_copied": io.out_tensor_bytes_copied if io else 0,
            # Binary tensor bytes of the HTTP requests the I/O loop queued, received from
            # the socket straight into the arena, and copied there from its read buffer.
            "in_tensor_bytes_in_place": io.in_tensor_bytes_in_place if io else 0,
            "in_tensor_bytes_copied": io.in_tensor_bytes_copied if io else 0,
        }
