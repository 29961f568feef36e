"""The model manager: owns the core and the table of served models, routes completions.

Front ends call `get()` for a model and queue requests through `LoadedModel.submit()`
(the general path) or the fast lane (`take_http_requests`, `submit_fast`); the manager
keeps the requests in flight, wakes on the core's eventfd and answers each one with its
response or error. Which models are loaded, and when that changes, is decided by
`repository.control.ModelControl`; the manager only swaps its tables (`publish`,
`withdraw`) when told.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from pathlib import Path

import orjson

from naiad import _core, outcome_record
from naiad.errors import (
    Cancelled,
    Internal,
    InvalidArgument,
    NaiadError,
    Unavailable,
    Unsupported,
    error_of_kind,
    error_of_triton_code,
)
from naiad.memory.shm import SharedMemory
from naiad.memory.shm import block_regions as shm_block_regions
from naiad.memory.shm import bypasses_cache as shm_bypasses_cache
from naiad.memory.shm import truncated_error as shm_truncated_error
from naiad.memory.shm import write_returned_outputs as shm_write_returned_outputs
from naiad.observability.latency_summary import new_summaries
from naiad.repository.catalog import Catalog
from naiad.repository.config import set_config_name
from naiad.repository.control import ModelControl
from naiad.repository.metadata import server_metadata
from naiad.scheduling.arrivals import ArrivalTracker
from naiad.scheduling.control_relay import ControlRelay
from naiad.scheduling.ensemble import EnsembleModel, is_ensemble
from naiad.scheduling.in_flight import (
    GRPC_STREAM,
    GRPC_UNARY,
    QUEUE_FAILURE_REASONS,
    GeneralPending,
    InFlight,
    LanePending,
)
from naiad.scheduling.model import READY, UNAVAILABLE, LoadedModel, UnloadableModel
from naiad.scheduling.model_table import ModelTable
from naiad.scheduling.request_traces import RequestTraces
from naiad.scheduling.routed_stats import RoutedStats
from naiad.scheduling.streaming import StreamPending
from naiad.sequence_parameters import SEQUENCE_TIMEOUT
from naiad.sequence_parameters import refusal as sequence_refusal
from naiad.tracing import tracer as tracer_protocol
from naiad.types import InferResponse, OutputTensor
from naiad.validation import log_prefix

log = logging.getLogger("naiad")


def _record_executions(stats, instance_id: int, batch_sizes: list, timings) -> None:
    """An answered batch's executions: one of all its requests' batch sizes, or, for the
    core's answer to ensemble requests that ended together (no instance), one each, as
    in Triton."""
    if instance_id == _core.NO_INSTANCE:
        for batch_size in batch_sizes:
            stats.record_execution(batch_size, timings)
    else:
        stats.record_execution(sum(batch_sizes), timings)


class ModelManager:
    def __init__(
        self,
        repository: Path | list[Path],
        arena_bytes: int = 1 << 30,
        *,
        control_mode: str = "none",
        load_threads: int = 4,
        strict_readiness: bool = True,
        drain_timeout: float = 30.0,
        fast_lane: bool = True,
        cache=None,
        rate_limit: tuple[bool, list] = (False, []),
        shm_max_regions: int = _core.SHM_DEFAULT_MAX_REGIONS,
        server_id: str = "naiad",
        load_retries: int = 0,
        config_name: str = "",
    ):
        repositories = [repository] if isinstance(repository, (str, Path)) else list(repository)
        self.catalog = Catalog(repositories)
        self.repository = self.catalog.repositories[0]
        self.strict_readiness = strict_readiness
        self.server_id = server_id  # --id: the name GET /v2 and ServerMetadata report
        set_config_name(config_name)  # --model-config-name: which file holds a config
        self.fast_lane = fast_lane  # False: no lane routes, every request goes the general way
        self.core = _core.Core(arena_bytes)
        # (execution_count, [rate_limit.RateLimitResource]): --rate-limit and its resources.
        self.core.configure_rate_limiter(*rate_limit)
        self.lane = _core.FastLane(self.core)
        if cache is not None:  # --cache-config: one cache (flags/cache_config.py), every path
            cache.enable(self.lane)
        self.grpc_lane = _core.GrpcLane(self.lane)  # the same codec, for gRPC ModelInfer
        # Client shared-memory regions (Triton's shm extensions); the core reads
        # inputs through it. Before any worker starts: they inherit its table offset.
        self.shm = SharedMemory(self.core, shm_max_regions)
        self.shm.registry.attach_lane(self.lane)  # the lanes take shm tensors too
        # Requests queued through the fast lane and through the general path (the HTTP
        # I/O loop counts the lane requests it takes itself: lane_stats adds them).
        self.lane_requests = 0
        self.general_requests = 0
        self.lane_refused = 0  # invalid requests the lane answered with the validator's error
        self.lane_cached = 0  # requests the lanes answered from the response cache
        # Lane requests the HTTP protocol collected from several reads into one buffer
        # first (http/protocol.py): one more host copy of their bytes.
        self.lane_collected = 0
        self.engine = None  # the front end's C++ I/O loop (naiad/io_engine.py), if any
        self.io = None  # its _core.HttpIo
        self._io_server = None
        self.table = ModelTable(self.lane, self.grpc_lane, fast_lane)
        self.models = self.table.models  # the one dict, for ModelControl and the metrics
        self._pending = InFlight()
        self.traces = RequestTraces(self.core, self.lane, self._pending, self.table)
        self.traces.on_activity = self._update_io_taking
        self._live = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self.arrivals = ArrivalTracker()  # updated by the front ends' connections
        self.control = ModelControl(
            self, self.catalog, control_mode, load_threads, drain_timeout, load_retries
        )
        self.control_relay = ControlRelay(self.core, self.control)
        self.routed_stats = RoutedStats(self.table)

    # -- lifecycle -----------------------------------------------------------------
    async def load_all(self, load_models: list[str] | None = None) -> bool:
        """Loads the models of the repositories at start: all of them, or in explicit
        mode only `load_models` (`*`: all). Returns False if any failed."""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.core.notify_fd, self._drain)
        folders, duplicates = self.catalog.scan()
        self.control.failures.update(duplicates)
        if self.control.mode == "explicit" and "*" not in (load_models or []):
            names = list(dict.fromkeys(load_models or []))
        else:
            names = sorted(folders)
        names = [name for name in names if name not in duplicates]
        results = await asyncio.gather(
            *(self.control.apply_load(name) for name in names), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NaiadError):
                raise result
        # A failed load raised (and was logged), also for a name that is no model folder.
        failed = any(isinstance(result, NaiadError) for result in results)
        return not failed and all(status == READY for _, _, status in self.load_table)

    @property
    def load_table(self) -> list[tuple[str, str, str]]:
        return self.control.load_table()

    # -- model control: the protocol-neutral calls of the HTTP and gRPC front ends ------
    @property
    def model_control_mode(self) -> str:
        return self.control.mode

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        """Entries {"name", "version", "state", "reason"}, as Triton omits them."""
        return self.control.index(ready_only)

    async def load_model(self, name: str, parameters: dict | None = None) -> None:
        """Loads or reloads `name`; `parameters` as a load request's (`config`: JSON text,
        `file:<path>`: bytes). Raises NaiadError with Triton's status and message."""
        await self.control.load(name, parameters or {})

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.control.unload(name, unload_dependents)

    # -- the served tables, changed by ModelControl ----------------------------------
    def new_model(self, entry, version: int):
        """A LoadedModel registered with the core and the lane (not started), or a stand-in
        that says why it could not even be registered."""
        try:
            if is_ensemble(entry.config):
                return EnsembleModel(self, entry, version, entry.config)
            return LoadedModel(self, entry, version, entry.config)
        except Exception as exc:  # no room for its channels, out of eventfds...
            return UnloadableModel(entry, version, str(exc))

    def publish(self, name: str, versions: dict[int, LoadedModel]) -> None:
        self.table.publish(name, versions)

    def withdraw(self, name: str) -> None:
        self.table.withdraw(name)

    def models_changed(self) -> None:
        self.table.models_changed()

    def uses_path(self, path: Path) -> bool:
        return self.table.uses_path(path)

    async def shutdown(self, timeout: float) -> None:
        """Waits for requests in flight (up to `timeout` s), then stops every worker."""
        self._live = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self._pending or (self.io is not None and self.io.in_flight)) and (
            loop.time() < deadline
        ):
            await asyncio.sleep(0.01)
        models = [m for versions in self.models.values() for m in versions.values()]
        models += self.control.retiring  # replaced by a reload, still draining
        await asyncio.gather(*(m.unload(max(deadline - loop.time(), 1.0)) for m in models))
        self.control.remove_temporary_folders(models)
        pendings = list(self._pending.values())
        self._pending.clear()
        if self.io is not None:
            pendings += self._io_pendings(self.io.owned_ids())
        for pending in pendings:
            pending.fail(Unavailable("server is shutting down"))
        if self.io is not None:
            self.io.flush_writes()
        loop.remove_reader(self.core.notify_fd)
        self.catalog.close()  # the cloud repositories' cache folders
        self.table.directory.close()
        self.traces.close()

    # -- queries for the front ends ------------------------------------------------
    def server_live(self) -> bool:
        return self._live

    def server_ready(self) -> bool:
        """Live and, with --strict-readiness (the default), every version that was loaded
        and not unloaded since is ready with all its instances up (as Triton)."""
        if not self._live:
            return False
        return not self.strict_readiness or self.table.all_healthy()

    def server_metadata(self) -> dict:
        return server_metadata(self.server_id)

    def get(self, name: str, version: str = "") -> LoadedModel:
        return self.table.get(name, version)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.table.model_ready(name, version)

    def pending_count(self, model: LoadedModel) -> int:
        """Requests of `model` accepted and not yet answered (queued or executing)."""
        return sum(1 for p in self._pending.values() if p.model is model)

    def awaiting_execution(self, model: LoadedModel) -> int:
        """Requests of `model` accepted and not yet executing, from every path: queued in
        the core or waiting there for the rate limiter (nv_inference_pending_request_count,
        as Triton counts it)."""
        if model.core_model is None:
            return 0
        return self.core.pending_requests(model.core_model)

    def draining(self, model: LoadedModel) -> bool:
        """Whether `model` still has requests to answer: the general path's, and the
        lane's, including those the HTTP I/O loop answers itself (no Python pending).
        A reload's replaced version waits for them before it is removed (ModelControl);
        removing it would fail them. On the event loop only (the lane's codec)."""
        if self.pending_count(model):
            return True
        return model.lane_model is not None and self.lane.in_flight_of(model.lane_model) > 0

    def arena_stats(self) -> dict:
        """The shared arena's use: instance channels plus everything in flight."""
        stats = self.core.arena_stats()
        stats["requests_in_flight"] = len(self._pending) + (self.io.in_flight if self.io else 0)
        return stats

    def lane_stats(self) -> dict:
        """How many requests took the fast lane and how many the general path."""
        # The HTTP I/O loop counts its own (its turns hand Python no counts).
        io = self.io
        return {
            "lane_requests": self.lane_requests + (io.requests_queued if io else 0),
            "general_requests": self.general_requests,
            "lane_refused": self.lane_refused + (io.requests_refused if io else 0),
            "lane_cached": self.lane_cached + (io.requests_cached if io else 0),
            "lane_collected": self.lane_collected,
            "lane_in_flight": self.lane.in_flight(),
            # Connections that sent an inference request and are still open, as the
            # batcher's early exit counts them (scheduling/arrivals.py).
            "inference_connections": self.arrivals.open + (io.open_count if io else 0),
        }

    def statistics(self, name: str = "", version: str = "") -> dict:
        return self.table.statistics(name, version)

    # -- the data path -------------------------------------------------------------
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
            if type(looked) is str:
                raise InvalidArgument(looked)
            if looked is not None:
                if looked[0]:  # a hit: answered now, counted in C++
                    future = self._loop.create_future()
                    outcome = outcome_record.read(looked[1])
                    future.set_result(_infer_response(model, request.id, outcome, looked[2]))
                    return future
                cache = looked[1:]
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
                raise Unavailable(_not_ready_message(model))
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
        self._schedule_flush()
        if sample is not None:
            self.traces.start_general(sample, model, request, request_id, submit_ns)
        if on_response is not None:
            self._pending[request_id] = StreamPending(
                request_id, model, request, batch_size, submit_ns, on_response
            )
            return request_id
        future = self._loop.create_future()
        self._pending[request_id] = GeneralPending(
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
        if request_id in self._pending:
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
        lane_model, request_id, batch_size, error = taken
        if error is not None:
            if type(error) is bytes:  # a response cache hit: its response
                self.lane_cached += 1
                on_done(error, None)
                return 0
            self.lane_refused += 1
            on_done(None, error_of_kind(*error))
            return 0
        self._pending[request_id] = LanePending(
            self.lane,
            self.table.lane_models[lane_model],
            request_id,
            batch_size,
            submit_ns,
            on_done,
            GRPC_STREAM if stream else GRPC_UNARY,
        )
        self.lane_requests += 1
        self._schedule_flush()
        if self.traces.active:
            self.traces.start_lane_traces(submit_ns, tracer_protocol.GRPC)
        return request_id

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
        """Keeps the lane's newly queued requests [(lane_model, request_id, batch_size,
        reply)] until they are answered; answers at once those the validator refused
        (`reply`: their whole response)."""
        models = self.table.lane_models
        pendings = self._pending
        queued = 0
        for lane_model, request_id, batch_size, reply in taken:
            if reply is not None:  # refused (batch size 0) or a response cache hit
                new_on_done(0, reply)  # answered at once, by the caller
                if batch_size:
                    self.lane_cached += 1
                else:
                    self.lane_refused += 1
                continue
            pendings[request_id] = LanePending(
                self.lane,
                models[lane_model],
                request_id,
                batch_size,
                submit_ns,
                new_on_done(request_id),
            )
            queued += 1
        if queued:
            self.lane_requests += queued
            self._schedule_flush()
            if self.traces.active:
                self.traces.start_lane_traces(submit_ns, tracer_protocol.HTTP)

    # -- tracing (tracing/): the lanes' sampler is in C++, the rest in RequestTraces -----
    def set_tracer(self, tracer) -> None:
        self.traces.set_tracer(tracer)

    @property
    def tracer(self):
        """The trace extension's Tracer (the front ends read its settings), or None."""
        return self.traces.tracer

    def register_lane_model(self, model: LoadedModel, lane_model: int) -> None:
        """`model` answers for the lane's model `lane_model` (take_http_requests)."""
        self.table.register_lane_model(model, lane_model)
        self.traces.lane_model_added(model, lane_model)

    def unregister_lane_model(self, lane_model: int) -> None:
        """The lane's model `lane_model` was removed; its requests in flight keep their model."""
        self.table.unregister_lane_model(lane_model)

    # -- the front end's C++ I/O loop (naiad/io_engine.py) ------------------------------
    def attach_io(self, engine) -> None:
        """`engine`'s loop polls the core from now on (_drain) and answers its own
        requests; the rest come to on_completions."""
        self.engine = engine
        self._io_server = engine
        self.io = engine.io
        self.arrivals.io = engine.io
        self.io.set_each(new_summaries() is not None)
        self._update_io_taking()

    def _update_io_taking(self) -> None:
        # Traced requests need Python at their take (tracing/): while any tracing is on,
        # the lane's requests go through the protocols.
        if self._io_server is not None:
            self._io_server.set_taking(not self.traces.active)

    def schedule_flush(self) -> None:
        self._schedule_flush()

    def record_io_answered(self, answered: list) -> None:
        """The statistics of the completions the I/O loop answered (one record each)."""
        models = self.table.lane_models_ever
        for record in answered:
            model = models.get(record.lane_model)
            if model is None:
                continue
            stats = model.stats
            timings = record.timings
            if record.successes:
                stats.record_successes(
                    record.successes,
                    record.inferences,
                    record.request_ns,
                    record.queue_ns,
                    timings,
                    record.each,
                )
            for took_ns in record.failed_ns:
                stats.record_failure(took_ns)
            if timings[0]:
                _record_executions(stats, record.instance_id, record.batch_sizes, timings)
            if record.lost:
                batch = len(record.batch_sizes) + len(record.lost)
                self._pending.fail_lost(record.lost, batch, self._adopt_io_pendings)

    def _io_pendings(self, request_ids) -> list:
        """The I/O loop's requests among `request_ids`, as lane pendings Python answers:
        their answers go back through the loop (Engine.on_done_of)."""
        out = []
        io = self.io
        engine = self._io_server
        for request_id in request_ids:
            owned = io.owned(request_id)
            if owned is None:
                continue
            lane_model, batch_size, submit_ns, _, stream = owned
            model = self.table.lane_models_ever.get(lane_model)
            if model is None:
                continue
            on_done = engine.on_done_of(request_id, owned)
            if on_done is None:  # a gRPC call whose client is gone
                continue
            grpc = GRPC_UNARY if stream else False
            out.append(
                LanePending(self.lane, model, request_id, batch_size, submit_ns, on_done, grpc)
            )
        return out

    def _adopt_io_pendings(self, request_ids) -> dict:
        """The I/O loop's requests among `request_ids`, pending from now on as every
        request Python answers (by request id)."""
        theirs = {p.request_id: p for p in self._io_pendings(request_ids)}
        self._pending.update(theirs)
        return theirs

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            # Dispatch once the requests of this loop turn are all queued.
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        self.core.flush(self.arrivals.possible())

    def _drain(self) -> None:
        if self._io_server is not None:  # it answers its own requests, in C++
            self._io_server.drain()
            return
        self.on_completions(self.core.poll(self.arrivals.possible()))

    def on_completions(self, completions: list, reason: str | None = None) -> None:
        """Answers the requests of completed batches and frees their result blocks.

        A request stays in `_pending` until the moment it is answered. So whatever goes
        wrong while one completion is answered (an unreadable result block, a bug), the
        requests it left unanswered get an internal error and the other completions are
        answered as usual: no client waits forever. `reason`: what failed requests
        are told instead of the status's own words."""
        for completion in completions:
            try:
                self._complete(*completion, reason=reason)
            except Exception:
                log.exception(
                    "answering the requests of a completed batch failed; those not answered "
                    "yet get an internal error"
                )
                self._pending.fail_unanswered(completion[-1])

    def _complete(
        self, _batch, status, _instance, offset, size, dispatch_ns, request_ids, reason=None
    ):
        if status == _core.COMPLETION_ROUTED:
            self.routed_stats.record(_instance, request_ids, _batch)
            return
        if status == _core.COMPLETION_ROUTED_REFUSED:
            self.routed_stats.record_refused(_instance, request_ids)
            return
        if status == _core.COMPLETION_CONTROL:  # the block is freed when read
            try:
                self.control_relay.take(
                    _instance, _batch, self.core.read_control_block(offset, size)
                )
            finally:
                self.core.free(offset)
            return
        try:
            get = self._pending.get
            pendings = [get(request_id) for request_id in request_ids]
            if self.io is not None and None in pendings and self.io.in_flight:
                # The I/O loop's requests in a completion it left to Python.
                theirs = self._adopt_io_pendings(request_ids)
                if theirs:
                    pendings = [p or theirs.get(i) for p, i in zip(pendings, request_ids)]
            live = [p for p in pendings if p is not None]
            if not live:
                if offset and status == _core.COMPLETION_OK:
                    self._late_execution(_instance, offset, size, len(request_ids))
                return
            end_ns = _core.now_ns()
            if status != _core.COMPLETION_OK:
                self._fail_batch(live, status, end_ns, reason)
                return
            timings = None
            lane = [p for p in live if p.lane]
            if lane:
                timings = self._answer_lane(lane, offset, size, request_ids, dispatch_ns, end_ns)
            if len(lane) != len(live):
                timings = self._answer_general(pendings, offset, size, dispatch_ns, end_ns)
            if timings is not None and timings[0]:  # streamed responses carry none
                model = live[0].model
                _record_executions(model.stats, _instance, [p.batch_size for p in live], timings)
                if getattr(model, "iterative", False):
                    self._count_runs(live, timings, dispatch_ns, end_ns)
        finally:
            if offset:
                self.core.free(offset)

    def _answer_lane(self, lane, offset, size, request_ids, dispatch_ns, end_ns):
        """Sends the fast lane's requests of a batch their responses, HTTP's or gRPC's
        (one codec answers both, so a batch is read once); returns the timings."""
        grpc_ids = {p.request_id for p in lane if p.grpc}
        if grpc_ids:
            streamed = {p.request_id for p in lane if p.grpc == GRPC_STREAM} or None
            result = self.grpc_lane.complete(
                offset, size, request_ids, grpc_ids, dispatch_ns, end_ns, streamed
            )
            if streamed is not None and result is not None:
                self._send_stream_partials(result[3])  # before the finals: in block order
                result = result[:3]
        else:
            result = self.lane.complete(offset, size, request_ids, dispatch_ns, end_ns)
        if result is None:
            self._fail_batch(lane, _core.COMPLETION_WORKER_FAILED, end_ns)
            return None
        timings, replies, finals = result
        if timings[0]:  # the answers were made where compute_output ends: the traces' end
            end_ns = max(end_ns, timings[0] + timings[1] + timings[2] + timings[3])
        pop = self._pending.pop
        stats = lane[0].model.stats
        successes = inferences = request_ns = queue_ns = 0
        # Per-request durations only for the latency summaries (off unless configured).
        each = None if stats.summaries is None else []
        traces = self.traces.open_traces
        for request_id, status, batch_size, took_ns, queued_ns, http in replies:
            pending = pop(request_id, None)
            if pending is None:  # answered already (failed, or the server is stopping)
                continue
            traced = traces and request_id in traces
            if traced:
                send_ns = _core.now_ns()
            if status != _core.REPLY_FAILED:  # an error the model sent counts as a success
                successes += 1
                inferences += batch_size
                request_ns += took_ns
                queue_ns += queued_ns
                if each is not None:
                    each.append((took_ns, queued_ns))
            else:
                stats.record_failure(took_ns)
            if status != _core.REPLY_OK and pending.grpc:  # (error kind, message)
                http = error_of_kind(*http)
            try:
                if status == _core.REPLY_OK or type(http) is bytes:  # gRPC: bytes or a GrpcAnswer
                    pending.on_done(http, None)
                else:
                    pending.on_done(None, http)
            except Exception:  # that client's connection; the others still get theirs
                log.exception("sending the response of request %d failed", request_id)
            if traced:
                self.traces.finish(request_id, timings, end_ns, (send_ns, _core.now_ns()))
        if grpc_ids:
            self.grpc_lane.release_answers()  # GrpcAnswers end before the block is freed
        if successes:
            stats.record_successes(successes, inferences, request_ns, queue_ns, timings, each)
        # A lane request whose final response is in the block is answered now; one without
        # gets it in a later block or fails when the batch ends (it stays pending).
        pending = self._pending
        final = set(finals)
        lost = [p.request_id for p in lane if p.request_id in final and p.request_id in pending]
        if lost:
            self._pending.fail_lost(lost, len(lane))
        return timings

    def _send_stream_partials(self, partials: list) -> None:
        """The responses before the last of ModelStreamInfer requests (a decoupled
        model's): each goes out at once; the request stays pending until its final one."""
        get = self._pending.get
        for request_id, ok, answer in partials:
            pending = get(request_id)
            if pending is None:
                continue
            try:
                if ok:
                    pending.on_done(answer, None, False)
                else:
                    pending.on_done(None, error_of_kind(*answer), False)
            except Exception:
                log.exception("sending a response of request %d failed", request_id)

    def _answer_general(self, pendings, offset, size, dispatch_ns, end_ns):
        """Resolves the general path's requests of a batch from its response block
        (csrc/ipc/ipc_schema.h, read through _core); returns the timings."""
        read = _core.read_response_block(self.core.arena, offset, size)
        if read is None:
            raise ValueError(f"the response block at {offset} ({size} bytes) is not readable")
        timings, responses = read
        # The queue ends when the worker starts the batch (Triton's backend start), as
        # KServeCodec::complete counts the lane's.
        dispatch_ns = max(dispatch_ns, timings[0])
        if any(index >= len(pendings) for index, *_ in responses):
            raise ValueError(
                f"the response block names a request beyond the batch of {len(pendings)}"
            )
        arena = self.core.arena
        # Ensemble requests answered together started apart: each its own start.
        started = _core.response_started(arena, offset, size)
        # HTTP answers once: a request's final response is its answer. A request without
        # one in this block gets it in a later block, or fails when the batch ends (the
        # core's completion for it): it stays pending until then.
        for record, (index, flags, code, json, slots) in enumerate(responses):
            pending = pendings[index]
            if started is not None:
                dispatch_ns = started[record]
            if pending is not None and pending.stream:
                self._deliver_stream(
                    pending, flags, code, json, slots, timings, dispatch_ns, end_ns
                )
                continue
            if not flags & _core.RESPONSE_FINAL:
                continue
            if pending is not None and not pending.lane:
                error = code if flags & _core.RESPONSE_ERROR else None
                if pending.cache is not None and pending.model.lane_model is not None:
                    key, lookup_ns = pending.cache  # a miss: its result goes in the cache
                    self.lane.cache_insert(
                        pending.model.lane_model, key, lookup_ns, offset, size, index
                    )
                outcome = outcome_record.read(json)
                self._resolve(
                    pending, outcome, flags, error, arena, slots, timings, dispatch_ns, end_ns
                )
        return timings

    def _count_final(self, pending, flags: int, timings, dispatch_ns: int, end_ns: int) -> None:
        """Counts a request's final response (`flags`: RESPONSE_*) in its model's
        statistics, a failure or a success as _core.response_counts_as_failure says."""
        stats = pending.model.stats
        if _core.response_counts_as_failure(flags):
            stats.record_failure(end_ns - pending.submit_ns)
        else:
            stats.record_success(
                pending.batch_size,
                end_ns - pending.submit_ns,
                dispatch_ns - pending.submit_ns,
                timings,
            )
        if getattr(pending.model, "iterative", False) and pending.request.parameters.get(
            "sequence_start"
        ):
            # Triton 2.51 ends an iterative sequence with a cancelled request of its own,
            # which its statistics count as a failure (CANCELED; no duration of its own).
            stats.record_failure(0, "CANCELED")

    def _resolve(
        self, pending, outcome, flags, code, arena, slots, timings, dispatch_ns, end_ns
    ) -> None:
        """Answers a general-path request from its final response (`flags`, and `code`
        when it is an error)."""
        model = pending.model
        future = pending.future
        if future.done():  # the client went away; nothing to answer
            self._pending.pop(pending.request_id, None)
            return
        if code is not None:
            self._count_final(pending, flags, timings, dispatch_ns, end_ns)
            self._pending.pop(pending.request_id, None)
            future.set_exception(error_of_triton_code(code, outcome.error or ""))
            return
        # Copied out so the response block can be freed at once.
        tensors = [bytes(arena[start : start + nbytes]) for start, nbytes in slots]
        response = _infer_response(model, pending.request.id, outcome, tensors)
        failure = None
        if isinstance(model, EnsembleModel):  # its outputs reach the frontend whole
            try:
                shm_write_returned_outputs(pending.request, response)
            except Internal as exc:
                failure = exc
        truncated = shm_truncated_error(pending.request)
        if truncated is not None:  # a region it used shrank under it (naiad/memory/shm.py)
            failure = InvalidArgument(truncated)
        if failure is not None:
            model.stats.record_failure(end_ns - pending.submit_ns)
            self._pending.pop(pending.request_id, None)
            future.set_exception(failure)
            return
        self._count_final(pending, flags, timings, dispatch_ns, end_ns)
        self._pending.pop(pending.request_id, None)
        future.set_result(response)
        if self.traces.open_traces:
            self.traces.finish_with_outputs(pending.request_id, response.outputs, timings, end_ns)

    def _count_runs(self, live: list, timings, dispatch_ns: int, end_ns: int) -> None:
        """An iterative model's execution (`timings`): each of its requests `live` that
        ran in it without finishing (the model rescheduled it) counts an inference and a
        success, as Triton counts every run of a request; the run that answers it counts
        with its answer."""
        pending = self._pending
        start_ns = max(dispatch_ns, timings[0])
        for p in live:
            if pending.get(p.request_id) is p:
                p.model.stats.record_success(
                    p.batch_size, end_ns - p.submit_ns, start_ns - p.submit_ns, timings
                )

    def _late_execution(self, instance_id: int, offset: int, size: int, batch_size: int) -> None:
        """A decoupled model's batch ended after its requests all had their final
        responses: its end block (no responses, the timings) still counts an execution."""
        read = _core.read_response_block(self.core.arena, offset, size)
        if read is None or read[1] or not read[0][0]:
            return
        for versions in self.models.values():
            for model in versions.values():
                if not getattr(model, "decoupled", False):
                    continue
                if any(i.instance_id == instance_id for i in model.instances):
                    model.stats.record_execution(batch_size, read[0])
                    return

    def _deliver_stream(
        self, pending, flags, code, json, slots, timings, dispatch_ns, end_ns
    ) -> None:
        """Hands one response of a streamed request to its consumer; the request is
        over (and counted) at its final one."""
        final = bool(flags & _core.RESPONSE_FINAL)
        error = code if flags & _core.RESPONSE_ERROR else None
        if final:
            self._pending.pop(pending.request_id, None)
            if self.traces.open_traces:
                self.traces.drop(pending.request_id)
            self._count_final(pending, flags, timings, dispatch_ns, end_ns)
        pending.deliver(flags, error, json, slots, self.core.arena, final)

    def _fail_batch(self, pendings: list, status: int, end_ns: int, reason=None) -> None:
        pop = self._pending.pop
        for pending in pendings:
            pop(pending.request_id, None)
            if self.traces.open_traces:  # a failed request's trace ends with it
                self.traces.finish(pending.request_id, None, end_ns)
            model = pending.model
            model.stats.record_failure(
                end_ns - pending.submit_ns, QUEUE_FAILURE_REASONS.get(status, "OTHER")
            )
            if status == _core.COMPLETION_CANCELLED:
                pending.fail(Cancelled("Request was cancelled"))
                continue
            if status == _core.COMPLETION_TIMED_OUT:
                pending.fail(Unavailable("Request timeout expired"))
                continue
            if status == _core.COMPLETION_SEQUENCE_TIMED_OUT:  # waited in the backlog
                pending.fail(Unavailable(SEQUENCE_TIMEOUT))
                continue
            if status == _core.COMPLETION_MODEL_GONE:
                # At shutdown every model goes: say why, as for the requests that outlive it.
                reason = _not_ready_message(model) if self._live else "server is shutting down"
                pending.fail(Unavailable(reason))
                continue
            if reason is not None:
                message = reason
            elif status == _core.COMPLETION_ARENA_FULL:
                pending.fail(
                    Unavailable(
                        f"Failed to process the request(s) for model '{model.name}': the "
                        "shared-memory arena has no room for the batch's outputs (--arena-size)"
                    )
                )
                continue
            elif status == _core.COMPLETION_INSTANCE_DIED:
                message = (
                    f"Failed to process the request(s) for model '{model.name}': the model "
                    "instance's worker process exited while running it; it is being restarted"
                )
            else:
                message = (
                    f"Failed to process the request(s) for model '{model.name}': the worker "
                    "could not run the batch (see the server log)"
                )
            pending.fail(Internal(message))


def _infer_response(model, request_id: str, outcome, tensors: list) -> InferResponse:
    """The general path's response from a worker's outcome record (outcome_record.read)
    and the output bytes, or a cache entry's."""
    outputs = [
        OutputTensor(name, datatype, shape, data)
        for (name, datatype, shape), data in zip(outcome.outputs, tensors)
    ]
    return InferResponse(model.name, str(model.version), request_id, outputs, outcome.parameters)


def _not_ready_message(model: LoadedModel) -> str:
    """Triton's words for a request to a version that is not (or no longer) loaded."""
    return (
        f"Request for unknown model: '{model.name}' version {model.version} is not at ready state"
    )


def format_load_table(rows: list[tuple[str, str, str]]) -> str:
    """The model | version | status table Triton prints after loading."""
    header = ("Model", "Version", "Status")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |", line]
    for row in rows:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    out.append(line)
    return "\n".join(out)


__all__ = ["ModelManager", "format_load_table", "UNAVAILABLE"]
