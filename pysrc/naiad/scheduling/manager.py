"""The model manager: the one object the front ends and models hold, composed of pieces
with one job each.

- `table` (model_table.py): the served models, publishing a change to the lanes and the
  workers' directory, the lookups (`get`, `model_ready`, `statistics`);
- `submits` (submit_path.py): the four ways a request enters the core, `cancel`, the
  paths' counts and the turn's flush;
- `in_flight` (in_flight.py): the requests accepted and not yet answered;
- `completions` (completions.py): answering completed batches, on the core's eventfd;
- `traces` (request_traces.py), `io_link` (io_loop_link.py), `control_relay`
  (control_relay.py), `routed_stats` (routed_stats.py).

It keeps what spans them: start (`load_all`), liveness and readiness, `shutdown`, and
the repository extension's calls (ModelControl decides which models are loaded; the
table only swaps when told). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from naiad import _core
from naiad.errors import NaiadError, Unavailable
from naiad.memory.shm import SharedMemory
from naiad.repository.catalog import Catalog
from naiad.repository.config import set_config_name
from naiad.repository.control import ModelControl
from naiad.repository.metadata import server_metadata
from naiad.scheduling.arrivals import ArrivalTracker
from naiad.scheduling.completions import CompletionRouter
from naiad.scheduling.control_relay import ControlRelay
from naiad.scheduling.ensemble import EnsembleModel, is_ensemble
from naiad.scheduling.in_flight import InFlight
from naiad.scheduling.io_loop_link import IoLoopLink
from naiad.scheduling.model import READY, UNAVAILABLE, LoadedModel, UnloadableModel
from naiad.scheduling.model_table import ModelTable
from naiad.scheduling.request_traces import RequestTraces
from naiad.scheduling.routed_stats import RoutedStats
from naiad.scheduling.submit_path import SubmitPath


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
        io_threads: int = 1,
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
        for _ in range(io_threads - 1):  # the lanes of the I/O loops past the first
            self.lane.add_mirror()
        self.grpc_lane = _core.GrpcLane(self.lane)  # the same codec, for gRPC ModelInfer
        # Client shared-memory regions (Triton's shm extensions); the core reads
        # inputs through it. Before any worker starts: they inherit its table offset.
        self.shm = SharedMemory(self.core, shm_max_regions)
        self.shm.registry.attach_lane(self.lane)  # the lanes take shm tensors too
        self.arrivals = ArrivalTracker()  # updated by the front ends' connections
        self._live = True
        self.table = ModelTable(self.lane, self.grpc_lane, fast_lane)
        self.models = self.table.models  # the one dict, for ModelControl and the metrics
        self.in_flight = InFlight()
        self.traces = RequestTraces(self.core, self.lane, self.in_flight, self.table)
        self.io_link = IoLoopLink(self.lane, self.in_flight, self.table, self.traces)
        self.traces.on_activity = self.io_link.update_taking
        self.submits = SubmitPath(
            self.core,
            self.lane,
            self.grpc_lane,
            self.in_flight,
            self.table,
            self.traces,
            self.io_link,
            self.arrivals,
        )
        self.control = ModelControl(
            self, self.catalog, control_mode, load_threads, drain_timeout, load_retries
        )
        self.control_relay = ControlRelay(self.core, self.control)
        self.routed_stats = RoutedStats(self.table)
        self.completions = CompletionRouter(
            self.core,
            self.lane,
            self.grpc_lane,
            self.in_flight,
            self.table,
            self.traces,
            self.routed_stats,
            self.control_relay,
            self.io_link,
            self.arrivals,
            self.server_live,
        )
        # The pieces' calls that the front ends, models and I/O loop make on the manager.
        self.get = self.table.get
        self.model_ready = self.table.model_ready
        self.statistics = self.table.statistics
        self.publish = self.table.publish
        self.withdraw = self.table.withdraw
        self.models_changed = self.table.models_changed
        self.uses_path = self.table.uses_path
        self.submit = self.submits.submit
        self.submit_fast = self.submits.submit_fast
        self.submit_grpc = self.submits.submit_grpc
        self.take_http_requests = self.submits.take_http_requests
        self.cancel = self.submits.cancel
        self.schedule_flush = self.submits.schedule_flush
        self.lane_stats = self.submits.lane_stats
        self.on_completions = self.completions.on_completions
        self.record_io_answered = self.io_link.record_answered
        self.set_tracer = self.traces.set_tracer

    # -- lifecycle -----------------------------------------------------------------
    async def load_all(self, load_models: list[str] | None = None) -> bool:
        """Loads the models of the repositories at start: all of them, or in explicit
        mode only `load_models` (`*`: all). Returns False if any failed."""
        self.submits.loop = loop = asyncio.get_running_loop()
        loop.add_reader(self.core.notify_fd, self.completions.drain)
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

    def register_lane_model(self, model: LoadedModel, lane_model: int) -> None:
        """`model` answers for the lane's model `lane_model` (SubmitPath.take_http_requests)."""
        self.table.register_lane_model(model, lane_model)
        self.traces.lane_model_added(model, lane_model)

    def unregister_lane_model(self, lane_model: int) -> None:
        """The lane's model `lane_model` was removed; its requests in flight keep their model."""
        self.table.unregister_lane_model(lane_model)

    async def shutdown(self, timeout: float) -> None:
        """Waits for requests in flight (up to `timeout` s), then stops every worker."""
        self._live = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (self.in_flight or self.io_link.in_flight_count) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        models = self.table.all_versions()
        models += self.control.retiring  # replaced by a reload, still draining
        await asyncio.gather(*(m.unload(max(deadline - loop.time(), 1.0)) for m in models))
        self.control.remove_temporary_folders(models)
        pendings = list(self.in_flight.values())
        self.in_flight.clear()
        engine = self.io_link.engine
        if engine is not None:
            pendings += self.io_link.pendings(self.io_link.owned_ids())
        for pending in pendings:
            pending.fail(Unavailable("server is shutting down"))
        if engine is not None:
            engine.each(lambda io: io.flush_writes())
        loop.remove_reader(self.core.notify_fd)
        self.catalog.close()  # the cloud repositories' cache folders
        self.table.directory.close()
        self.traces.close()

    # -- health and queries for the front ends ---------------------------------------
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
        if self.in_flight.count_of(model):
            return True
        if model.lane_model is None:
            return False
        lane_model = model.lane_model
        return (self.lane.in_flight_of(lane_model) + self.io_link.lane_in_flight_of(lane_model)) > 0

    def arena_stats(self) -> dict:
        """The shared arena's use: instance channels plus everything in flight."""
        stats = self.core.arena_stats()
        stats["requests_in_flight"] = len(self.in_flight) + self.io_link.in_flight_count
        return stats

    def io_loop_stats(self) -> dict:
        """The C++ I/O loops' connections (GET /v2/naiad/io_loops)."""
        return {"loops": self.io_link.loop_stats()}

    @property
    def tracer(self):
        """The trace extension's Tracer (the front ends read its settings), or None."""
        return self.traces.tracer

    # -- the front end's C++ I/O loop (naiad/io_engine.py) ------------------------------
    @property
    def engine(self):
        """The I/O loop's Engine once one is attached (io_engine.engine_for), or None."""
        return self.io_link.engine

    def attach_io(self, engine) -> None:
        """`engine`'s loop polls the core from now on (CompletionRouter.drain) and answers
        its own requests; the rest come to on_completions."""
        self.arrivals.io = engine.io
        self.io_link.attach(engine)


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
