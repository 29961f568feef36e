"""`naiad.Server`: the server in the caller's process, with Triton's in-process API.

The server is what `naiad serve` runs (naiad/server.py `start` and `shutdown`, one
definition of both), on an event loop of its own in a background thread of the
caller's process; the model workers are separate processes, as with `naiad serve`.
That thread installs no signal handlers: the caller's process keeps its own. Every
call from the caller's threads runs on that loop (`asyncio.run_coroutine_threadsafe`)
and waits for its result; errors come back as Triton's exception classes
(naiad/inprocess/errors.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from functools import partial
from typing import Any

from naiad.inprocess.errors import (
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    triton_error,
)
from naiad.inprocess.model import InferenceRequest, Model
from naiad.inprocess.options import Options
from naiad.observability import triton_log

log = logging.getLogger("naiad")

_UNLOADED_STATES = (None, "UNAVAILABLE")


class ModelDictionary(dict):
    """{(name, version): Model} of the repository index; `[name]` alone gives the
    model at version -1 (as Triton's)."""

    def __init__(self, server: Server, models: list[Model]) -> None:
        super().__init__()
        for model in models:
            self[(model.name, model.version)] = model
        self._server = server
        self._names = {name for name, _ in self.keys()}

    def __getitem__(self, key):
        if isinstance(key, tuple):
            try:
                return dict.__getitem__(self, key)
            except KeyError:
                raise KeyError(f"Unknown Model: {key}") from None
        if key in self._names:
            return Model(self._server, key, -1)
        raise KeyError(f"Unknown Model: {key}")


class Server:
    """A Naiad server in this process: `Server(options)` or `Server(model_repository=
    ..., **options)` (naiad/inprocess/options.py), then `start()`; or `with
    Server(...) as server:`, which starts it and stops it at the end."""

    def __init__(self, options: Options | None = None, **kwargs) -> None:
        self.options = options if options is not None else Options(**kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = None  # naiad.server.Running

    # -- lifecycle -------------------------------------------------------------
    def start(
        self,
        wait_until_ready: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> Server:
        """Loads the repository (as the control mode says) and starts the front ends
        asked for. Returns once the models have loaded; InvalidArgumentError for a bad
        option, InternalError when a model failed to load (with exit_on_error)."""
        from naiad import server as naiad_server

        if self._loop is not None:
            raise InvalidArgumentError("Server already started")
        options = self.options.namespace()
        # The log settings are the process's: stop() gives back the caller's (a pytest
        # run's later tests, the embedding program's own pb_utils.Logger use).
        self._log_before = triton_log.settings()
        _apply_log_settings(options)
        loop = _new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="naiad-server", daemon=True)
        thread.start()
        try:
            running = asyncio.run_coroutine_threadsafe(naiad_server.start(options), loop).result()
        except BaseException as exc:
            _end_loop(loop, thread)
            triton_log.apply(self._log_before)
            if isinstance(exc, naiad_server.StartupError):
                kind = InternalError if exc.internal else InvalidArgumentError
                raise kind(exc.message) from None
            if isinstance(exc, OSError):  # a front end's port in use, ...
                raise UnavailableError(f"failed to start a front end: {exc}") from None
            raise
        self._loop, self._thread, self._running = loop, thread, running
        started = time.monotonic()
        while (
            wait_until_ready
            and not self.ready()
            and (timeout is None or time.monotonic() - started < timeout)
        ):
            time.sleep(polling_interval)
        if wait_until_ready and not self.ready():
            raise UnavailableError("Timeout before ready")
        return self

    def stop(self) -> None:
        """Answers the requests in flight (up to exit_timeout), stops the workers and
        the front ends, and ends the server's thread. The server can start again."""
        from naiad import server as naiad_server

        self._require_started()
        loop, thread, running = self._loop, self._thread, self._running
        try:
            asyncio.run_coroutine_threadsafe(naiad_server.shutdown(running), loop).result()
        finally:
            self._loop = self._thread = self._running = None
            _end_loop(loop, thread)
            triton_log.apply(self._log_before)

    def __enter__(self) -> Server:
        if self._loop is None:
            self.start(wait_until_ready=True)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._loop is not None:
            self.stop()

    # -- the server ------------------------------------------------------------
    def live(self) -> bool:
        return self._call(lambda manager: manager.server_live())

    def ready(self) -> bool:
        return self._call(lambda manager: manager.server_ready())

    def metadata(self) -> dict[str, Any]:
        """{"name", "version", "extensions"}, as GET /v2 answers it."""
        return self._call(lambda manager: manager.server_metadata())

    def metrics(self, metric_format: str = "prometheus") -> str:
        """Triton's metrics in Prometheus' text format, as the metrics port serves them
        (the host's CPU and GPU gauges only while `metrics_port` polls them)."""
        if metric_format != "prometheus":
            raise UnsupportedError(f"metric format {metric_format!r}: only 'prometheus'")
        from naiad.observability.metrics import TritonCollector, render

        return self._call(lambda manager: render(TritonCollector(manager)).decode())

    # -- models ----------------------------------------------------------------
    def model(self, model_name: str, model_version: int = -1) -> Model:
        """The model `model_name` at `model_version` (-1: as the version policy
        serves); not looked up until it is used."""
        return Model(self, model_name, model_version)

    def models(self, exclude_not_ready: bool = False) -> ModelDictionary:
        """The repository index: {(name, version): Model} with each one's state
        (version -1 and state None for a model never loaded)."""
        entries = self._call(lambda manager: manager.repository_index(exclude_not_ready))
        models = [
            Model(
                self,
                entry["name"],
                int(entry["version"]) if "version" in entry else -1,
                entry.get("state"),
                entry.get("reason"),
            )
            for entry in entries
        ]
        return ModelDictionary(self, models)

    def load(self, model_name: str, parameters: dict[str, Any] | None = None) -> Model:
        """Loads (or reloads) `model_name` and waits for it (explicit mode only).
        `parameters`: "config" (JSON text) and "file:<path>" (bytes), as Triton's."""
        self._call_async(lambda manager: manager.load_model(model_name, parameters))
        return self.model(model_name)

    def unload(
        self,
        model: str | Model,
        unload_dependents: bool = False,
        wait_until_unloaded: bool = False,
        polling_interval: float = 0.1,
        timeout: float | None = None,
    ) -> None:
        """Unloads a model (explicit mode only); its requests in flight are answered
        first. The call returns once it is unloaded, so `wait_until_unloaded` (Triton's)
        only polls the index as Triton's does."""
        name = model.name if isinstance(model, Model) else model
        self._call_async(lambda manager: manager.unload_model(name, unload_dependents))
        if wait_until_unloaded:
            started = time.monotonic()
            while not self._unloaded(name) and (
                timeout is None or time.monotonic() - started < timeout
            ):
                time.sleep(polling_interval)

    def _unloaded(self, name: str) -> bool:
        return all(
            model.state in _UNLOADED_STATES
            for (model_name, _), model in self.models().items()
            if model_name == name
        )

    def register_model_repository(self, repository_path: str, name_mapping=None) -> None:
        """Serves the models of `repository_path` too (explicit mode only); `name_mapping`
        (subfolder -> model name, Triton's) serves subfolders under other names."""
        mapping = {name: subfolder for subfolder, name in (name_mapping or {}).items()}
        self._call(lambda manager: manager.control.register_repository(repository_path, mapping))

    def unregister_model_repository(self, repository_path: str) -> None:
        self._call(lambda manager: manager.control.unregister_repository(repository_path))

    # -- running on the server's loop -------------------------------------------
    def _require_started(self) -> None:
        if self._loop is None:
            raise InvalidArgumentError("Server not started")

    def _on_loop(self, coroutine):
        """Runs `coroutine` on the server's loop and waits for its result; a NaiadError
        is raised as Triton's class of its kind."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise InvalidArgumentError("the in-process API cannot be called on its own loop")
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
        except Exception as exc:
            raise triton_error(exc) from None

    def _call(self, function):
        """`function(manager)` on the server's loop; its result."""
        self._require_started()
        manager = self._running.manager

        async def call():
            return function(manager)

        return self._on_loop(call())

    def _call_async(self, function):
        """`await function(manager)` on the server's loop; its result."""
        self._require_started()
        manager = self._running.manager

        async def call():
            return await function(manager)

        return self._on_loop(call())

    def _post(self, callback) -> None:
        """`callback()` on the server's loop, not waited for."""
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(callback)

    def _submit(self, model: Model, request: InferenceRequest, deliver):
        """Queues `request` on `model` through its general submit path; every
        response goes to `deliver(response, error, final)` on the server's loop.
        Returns the callable (for the loop) that cancels it; raises what the core
        refuses it with."""
        infer_request = request._naiad_request()  # conversion errors: the caller's thread

        def submit(manager):
            loaded = manager.get(model.name, model._version_text)
            if getattr(loaded, "decoupled", False):
                request_id = loaded.submit(infer_request, on_response=deliver)
                return partial(manager.cancel, request_id)
            future = loaded.submit(infer_request)
            future.add_done_callback(partial(_deliver_future, deliver))
            return future.cancel

        return self._call(submit)


def _deliver_future(deliver, future) -> None:
    """A one-response request's future is done: its response (or error) is final."""
    if future.cancelled():
        from naiad.errors import Cancelled

        deliver(None, Cancelled("request was cancelled"), True)
        return
    exc = future.exception()
    if exc is not None:
        deliver(None, exc, True)
    else:
        deliver(future.result(), None, True)


def _apply_log_settings(options) -> None:
    """The workers' log settings from the options (Triton's log_* options); the
    server's own records go through the `naiad` logger, as the caller's logging
    configures it (its handlers and the root level are left as they are)."""
    root = logging.getLogger()
    level = root.level
    try:
        triton_log.apply(
            {
                "log_info": options.log_info,
                "log_warning": options.log_warning,
                "log_error": options.log_error,
                "log_verbose_level": max(0, options.log_verbose),
                "log_format": options.log_format,
                "log_file": options.log_file,
            }
        )
    except OSError as exc:
        # As `naiad serve` (and Triton): a log file that cannot be opened means stderr.
        log.warning("cannot open log_file=%s (%s): logging to stderr", options.log_file, exc)
    root.setLevel(level)


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency; this keeps odd platforms running
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def _end_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stops the server's loop, waits for its thread, closes it."""
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
