"""The Python backend: runs Triton Python models (`model.py` with `TritonPythonModel`).

It is the one place that speaks `pb_utils`: a worker builds one `PythonModelBackend` per model
instance with exactly the args dict Triton's `initialize()` receives, then calls `execute()`
once per batch (a `naiad.backends.base.Batch`) and `finalize()` on unload.

    backend = PythonModelBackend({
        "model_config": json.dumps(config),      # the model's config, as a JSON string
        "model_instance_kind": "CPU",            # or "GPU"
        "model_instance_name": "add_sub_0_0",
        "model_instance_device_id": "0",
        "model_repository": "/models/add_sub",   # the model's own folder
        "model_version": "1",
        "model_name": "add_sub",
    })
    results = backend.execute(batch)
    # one entry per request: a base.Response (outputs, parameters) or a base.RequestError

`execute` turns each request view into a `pb_utils.InferenceRequest` whose input Tensors wrap
the arena views without a copy, runs the model's `execute`, and turns each
`pb_utils.InferenceResponse` back into a Response or RequestError (`execute_requests` does the
last two steps for requests built elsewhere).

Loading follows Triton: the file is `<model_repository>/<model_version>/<default_model_filename
or "model.py">`; the version folder and the model folder are appended to `sys.path`;
`import triton_python_backend_utils` gives `naiad.triton_python_backend_utils`; the module is
imported as a package member so relative imports (`from .helpers import x`) work.

A Python-based backend (naiad.backends.python_based) gives the file instead
(`backend_file`): `<backend-directory>/<backend>/model.py` for every model naming the
backend, whatever the model's folder holds; its folder is appended to `sys.path`, and
`pb_utils.get_model_dir()` is the model's version folder, as in Triton.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import itertools
import json
import operator
import os
import re
import sys
import threading
import traceback
from typing import Any

from naiad import _core
from naiad import triton_python_backend_utils as pb_utils
from naiad.backends.base import Backend, Batch, RequestError, Rescheduled, Response, Result
from naiad.errors import NaiadError

__all__ = ["ModelLoadError", "PythonModelBackend", "auto_complete_config"]

DEFAULT_MODEL_FILENAME = "model.py"

_module_ids = itertools.count()

# A pb_utils.Tensor's fields, read in C by map() (PythonModelBackend._result).
_name_of = operator.attrgetter("_name")
_pair_of = operator.attrgetter("_name", "_array")


class ModelLoadError(NaiadError):
    """A Python model could not be loaded; the message names the model and the cause."""

    http_status = 400


def _install_pb_utils() -> None:
    # Models do `import triton_python_backend_utils as pb_utils`.
    sys.modules["triton_python_backend_utils"] = pb_utils


def _describe(exc: BaseException, model_path: str | None = None) -> str:
    """'TypeName: message', with where it happened in the model's files when known."""
    if isinstance(exc, SyntaxError):
        where = os.path.basename(exc.filename or model_path or "?")
        return f"SyntaxError: {exc.msg} ({where}, line {exc.lineno})"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if model_path is not None:
        model_dir = os.path.dirname(os.path.abspath(model_path))
        frames = [
            frame
            for frame in traceback.extract_tb(exc.__traceback__)
            if os.path.abspath(frame.filename).startswith(model_dir + os.sep)
        ]
        if frames:
            last = frames[-1]
            text += f" (at {os.path.basename(last.filename)}:{last.lineno} in {last.name})"
    return text


def _parse_config(model_config: Any) -> dict:
    if isinstance(model_config, dict):
        return model_config
    if isinstance(model_config, (str, bytes)):
        config = json.loads(model_config) if model_config else {}
        if not isinstance(config, dict):
            raise ValueError("model_config is not a JSON object")
        return config
    raise ValueError(f"model_config must be a JSON string, not {type(model_config).__name__}")


def _model_file(model_name: str, model_dir: str, version: str, config: dict) -> str:
    filename = config.get("default_model_filename") or DEFAULT_MODEL_FILENAME
    path = os.path.join(model_dir, version, filename)
    if not filename.endswith(".py"):
        raise ModelLoadError(
            f"failed to load Python model '{model_name}': model file name must end with "
            f"'.py', got '{filename}'"
        )
    if not os.path.isfile(path):
        raise ModelLoadError(
            f"failed to load Python model '{model_name}': Python model file not found in '{path}'"
        )
    return path


def _import_model(model_name: str, version: str, path: str, backend: bool = False):
    """Import the model file as a member of a private package over its folder. `backend`:
    the file is a Python-based backend's, whose folder alone goes on sys.path (Triton's
    stub appends the version folder and the model folder only for a model's own file)."""
    _install_pb_utils()
    version_dir = os.path.dirname(os.path.abspath(path))
    folders = (version_dir,) if backend else (version_dir, os.path.dirname(version_dir))
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)

    safe = re.sub(r"\W", "_", f"{model_name}_{version}")
    package_name = f"_naiad_python_model_{safe}_{next(_module_ids)}"
    package_spec = importlib.machinery.ModuleSpec(package_name, None, is_package=True)
    package = importlib.util.module_from_spec(package_spec)
    package.__path__ = [version_dir]
    sys.modules[package_name] = package

    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = f"{package_name}.{stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        sys.modules.pop(package_name, None)
        raise ModelLoadError(
            f"failed to load Python model '{model_name}' version {version}: error importing "
            f"{path}: {_describe(exc, path)}"
        ) from exc

    model_class = getattr(module, "TritonPythonModel", None)
    if model_class is None:
        raise ModelLoadError(
            f"failed to load Python model '{model_name}' version {version}: {path} does not "
            "define class TritonPythonModel"
        )
    if not isinstance(model_class, type):
        raise ModelLoadError(
            f"failed to load Python model '{model_name}' version {version}: TritonPythonModel "
            f"in {path} is not a class"
        )
    return module, model_class


def auto_complete_config(
    model_repository: str, model_version: str, model_config: Any, backend_file: str | None = None
) -> dict:
    """Run the model's `TritonPythonModel.auto_complete_config` (if any) on its config.

    `model_config` is the config as a JSON string or dict; the completed config comes back
    as a dict. `backend_file`: the model.py of the Python-based backend the config names,
    which Triton runs instead of the model's own file. ModelLoadError if the model cannot
    be imported or the function fails.
    """
    try:
        config = _parse_config(model_config)
    except ValueError as exc:
        raise ModelLoadError(f"failed to auto-complete Python model config: {exc}") from exc
    model_name = config.get("name") or os.path.basename(os.path.normpath(model_repository))
    version = str(model_version)
    path = backend_file or _model_file(model_name, model_repository, version, config)
    _, model_class = _import_model(model_name, version, path, backend=backend_file is not None)
    completer = getattr(model_class, "auto_complete_config", None)
    model_config_obj = pb_utils.ModelConfig(config)
    if completer is None:
        return model_config_obj.as_dict()
    try:
        result = completer(model_config_obj)
    except Exception as exc:
        raise ModelLoadError(
            f"failed to auto-complete config of Python model '{model_name}': {_describe(exc, path)}"
        ) from exc
    if not isinstance(result, pb_utils.ModelConfig):
        raise ModelLoadError(
            f"auto_complete_config function in model '{model_name}' must return a valid "
            "pb.ModelConfig object."
        )
    return result.as_dict()


def _run_nested(coroutine, running: asyncio.AbstractEventLoop):
    loop = asyncio.new_event_loop()
    asyncio.events._set_running_loop(None)
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()
        asyncio.events._set_running_loop(running)


class PythonModelBackend(Backend):
    """One instance of a Triton Python model, loaded and initialized."""

    # Outputs a response keeps whatever the client asked for: a decoupled sequence
    # model's state outputs, which worker/sequence.py takes out of each response.
    kept_outputs: frozenset = frozenset()

    def __init__(self, args: dict, backend_file: str | None = None):
        """`args`: Triton's initialize() args. `backend_file`: the model.py of the
        Python-based backend the config names, run instead of the model's own file."""
        try:
            config = _parse_config(args.get("model_config", "{}"))
        except ValueError as exc:
            name = args.get("model_name", "?")
            raise ModelLoadError(
                f"failed to load Python model '{name}': bad model_config: {exc}"
            ) from exc
        model_dir = args.get("model_repository")
        if not model_dir:
            raise ModelLoadError("failed to load Python model: args has no 'model_repository'")
        self.name: str = str(
            args.get("model_name") or config.get("name") or os.path.basename(model_dir)
        )
        # Triton names the instance ('add_sub_0_0') in the errors of its requests.
        self.instance_name: str = str(args.get("model_instance_name") or self.name)
        self.version: str = str(args.get("model_version", "1"))
        # InferenceRequest.model_version() is an int in Triton.
        self._version_number = int(self.version) if self.version.isdigit() else -1
        self.model_config: dict = config
        # model_transaction_policy { decoupled: true }: the worker calls
        # execute_decoupled() and the model answers through response senders.
        self.decoupled: bool = pb_utils.using_decoupled_model_transaction_policy(config)
        # sequence_batching { iterative_sequence: true }: a request the model releases
        # with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE runs again (run_rescheduled). The
        # requests waiting for that, each with its _RequestStream (decoupled) or its
        # Rescheduled (where its answer goes).
        self.iterative: bool = bool(
            (config.get("sequence_batching") or {}).get("iterative_sequence", False)
        )
        self.rescheduled: list = []
        # The sequence control inputs of a rescheduled request's next run, by name: a
        # callable that gives them (worker/sequence.py sets it).
        self.refresh_controls = None
        self.model_path: str = backend_file or _model_file(
            self.name, model_dir, self.version, config
        )

        # Triton hands initialize() a dict of strings, model_config as JSON text.
        self.args: dict = {key: value for key, value in args.items()}
        if not isinstance(self.args.get("model_config"), str):
            self.args["model_config"] = json.dumps(config)
        for key in ("model_version", "model_instance_device_id"):
            if key in self.args and not isinstance(self.args[key], str):
                self.args[key] = str(self.args[key])

        self._loop: asyncio.AbstractEventLoop | None = None
        # The requests execute() is running on, and the responses their senders got
        # (by index) when a model that is not decoupled answers through senders.
        self._executing: list | None = None
        self._sent: dict[int, _SentResponse] = {}
        self._finalized = False
        # RequestHeader -> what its requests get of it (see _header_plan).
        self._plans: dict = {}

        self.module, model_class = _import_model(
            self.name, self.version, self.model_path, backend=backend_file is not None
        )
        # Triton's get_model_dir(): the folder of <model>/<version>/model.py, which for a
        # Python-based backend is the version folder though the file is elsewhere.
        if backend_file:
            pb_utils._set_model_dir(os.path.join(os.path.abspath(model_dir), self.version))
        else:
            pb_utils._set_model_dir(os.path.dirname(os.path.abspath(self.model_path)))

        try:
            self.model = model_class()
        except Exception as exc:
            raise ModelLoadError(
                f"failed to load Python model '{self.name}' version {self.version}: "
                f"TritonPythonModel() raised {_describe(exc, self.model_path)}"
            ) from exc
        if not callable(getattr(self.model, "execute", None)):
            raise ModelLoadError(
                f"failed to load Python model '{self.name}' version {self.version}: Python "
                f"model {self.model_path} does not implement `execute` method."
            )
        initialize = getattr(self.model, "initialize", None)
        if initialize is not None:
            try:
                self._await(initialize(self.args))
            except Exception as exc:
                pb_utils.Logger.log_error(
                    f"initialize() of model '{self.name}' failed:\n{traceback.format_exc()}"
                )
                raise ModelLoadError(
                    f"failed to load Python model '{self.name}' version {self.version}: "
                    f"initialize() raised {_describe(exc, self.model_path)}"
                ) from exc

    # -- execution ----------------------------------------------------------------------------

    def _await(self, value):
        """Run a coroutine returned by an async model method to completion."""
        if not asyncio.iscoroutine(value):
            return value
        running = asyncio.events._get_running_loop()
        if running is not None:
            # A batch nested in a BLS wait of an async execute (worker/bls.py): it runs
            # to completion on a loop of its own while the outer one is suspended.
            return _run_nested(value, running)
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(value)

    def _batch_error(
        self, message: str, count: int, detail: str | None = None
    ) -> list[RequestError]:
        text = (
            f"Failed to process the request(s) for model '{self.instance_name}', message: {message}"
        )
        pb_utils.Logger.log_error(text if detail is None else f"{text}\n{detail}")
        error = RequestError(text)
        return [error] * count

    def _header_plan(self, header) -> _core.RequestPlan:
        """What every request of `header` gets: its input names, their pb_utils types,
        and the fields of its pb_utils.InferenceRequest."""
        if len(self._plans) >= 1024:
            self._plans.clear()
        plan = self._plans[header] = _core.RequestPlan(
            input_names=header.input_names,
            input_dtypes=tuple(
                pb_utils.TRITON_TYPE_OF_WIRE[wire] for wire in header.input_datatypes
            ),
            request_id=header.id,
            correlation_id=header.correlation_id,
            requested_output_names=header.requested_outputs,
            model_name=self.name,
            model_version=self._version_number,
            parameters=header.parameters_json,
            timeout=header.timeout_us,
            flags=header.flags,
        )
        return plan

    def _requests(self, batch: Batch) -> list:
        """The batch as the pb_utils requests execute() receives, made in C: their input
        Tensors wrap the batch's arrays (no copy). Headers are shared by the requests
        that carry the same one: what a request takes of its header is gathered once
        per header (_header_plan)."""
        return _core.server_requests(
            batch.headers,
            batch.arrays,
            self._plans,
            self._header_plan,
            pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL,
        )

    def execute(self, batch: Batch) -> list[Result]:
        """Run the model on a batch; per request, a Response or a RequestError.

        The model's execute() receives the batch as pb_utils requests whose input Tensors
        wrap the batch's arrays (no copy)."""
        requests = self._requests(batch)
        if batch.trace_contexts is not None:  # traced in mode opentelemetry
            pb_utils._set_trace_contexts(requests, batch.trace_contexts)
        running = pb_utils._RUNNING  # for BLS calls made with trace=request.trace()
        running.append((batch.batch_id, requests))
        try:
            results = self.execute_requests(requests)
        finally:
            running.pop()
        if self.iterative:
            self._hold_rescheduled(requests, results)
        return results

    def _hold_rescheduled(self, requests: list, results: list) -> None:
        """The requests of a model that is not decoupled which it rescheduled wait for
        their next run, each with its Rescheduled result."""
        for request, result in zip(requests, results):
            if type(result) is Rescheduled:
                request._release_flags = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
                self.rescheduled.append((request, result))

    def execute_requests(self, requests: list[pb_utils.InferenceRequest]) -> list[Result]:
        """Run the model's execute() on pb_utils requests; per request, a Response or a
        RequestError."""
        count = len(requests)
        if count == 0:
            return []
        # Response senders are made only for a request that asks (get_response_sender):
        # nothing per request here.
        self._executing = requests
        # Set only when it changes: assigning a class attribute invalidates the
        # interpreter's caches of the class's attribute lookups, and every batch would
        # then run the model's pb_utils calls on cold caches (about 0.5 µs per request
        # at batch 8, perf/worker_batch.py).
        if pb_utils.InferenceRequest._single_sender_factory != self._single_sender:
            pb_utils.InferenceRequest._single_sender_factory = self._single_sender
        try:
            returned = self.model.execute(requests)
            if type(returned) is not list:  # an async execute's coroutine, or a mistake
                returned = self._await(returned)
        except Exception as exc:
            # The worker answers this batch, then exits to be restarted (worker.main).
            self.out_of_memory = isinstance(exc, MemoryError)
            self._sent.clear()
            return self._batch_error(
                _describe(exc, self.model_path), count, detail=traceback.format_exc()
            )
        finally:
            self._executing = None
        if self._sent:
            return self._results_with_sent(requests, returned)
        if returned is None:
            return self._batch_error(
                "execute() returned None; a model that is not decoupled must return a list "
                "with one InferenceResponse per request, or send each request's response "
                "through its response sender.",
                count,
            )
        return self._returned_results(requests, returned)

    def _returned_results(self, requests, returned) -> list[Result]:
        """Per request, the Response or RequestError of what execute() returned."""
        count = len(requests)
        if not isinstance(returned, list):
            return self._batch_error(
                f"Expected a list in the execute return, found type '{type(returned)}'.",
                count,
            )
        if len(returned) != count:
            return self._batch_error(
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{count}, and "
                f"InferenceResponse(s) size is:{len(returned)}",
                count,
            )
        response_type = pb_utils.InferenceResponse
        for response in returned:
            if (
                type(response) is not response_type
                and response is not None
                and not isinstance(response, response_type)
            ):
                return self._batch_error(
                    "Expected an 'InferenceResponse' object in the execute function return "
                    f"list, found type '{type(response)}'.",
                    count,
                )
        # The plain answers in C; the others (None there) through _result's checks.
        results = _core.plain_python_results(
            requests, returned, pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
        )
        if None in results:
            for index, result in enumerate(results):
                if result is None:
                    results[index] = self._result(requests[index], returned[index])
        return results

    # -- response senders of a model that is not decoupled -----------------------------------

    def _single_sender(self, request):
        """The response sender of `request` if it is one the running execute() received
        (pb_utils.InferenceRequest.get_response_sender), else None."""
        executing = self._executing
        if executing is None or self.decoupled:
            return None
        index = next((i for i, r in enumerate(executing) if r is request), None)
        if index is None:
            return None
        sent = self._sent[index] = _SentResponse(request._requested_output_names)
        return _SingleResponseSender(sent, request._cancel_probe)

    def _results_with_sent(self, requests, returned) -> list[Result]:
        """The batch's results once each request given a response sender has its final
        flag: the sent response (it wins over one execute() also returned, as in Triton),
        the others' from what execute() returned."""
        sent, self._sent = self._sent, {}
        if returned is None:
            returned = [None] * len(requests)
        results = self._returned_results(requests, returned)
        waiting = {}
        for index, slot in sent.items():
            given = index < len(returned) and returned[index] is not None
            if slot.response is None and given:
                continue  # a sender it did not use: the returned response answers
            if slot.response is not None and given:
                pb_utils.Logger.log_error(
                    f"Failed to process the request(s) for model '{self.instance_name}', message: "
                    "Unable to send response. Non-decoupled model cannot send more than one "
                    "response."
                )
            waiting[index] = slot
            # The senders are the model's alone now: one it drops unsent ends the wait.
            requests[index]._response_sender = None
        del requests
        for index, slot in waiting.items():
            slot.done.wait()
            if slot.response is None or not slot.final:
                results[index] = self._failure(
                    "the model released the request without sending a response flagged "
                    "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
                )
            else:
                results[index] = self._result(slot.requested, slot.response)
        return results

    # -- decoupled models --------------------------------------------------------------------

    def execute_decoupled(self, batch: Batch, stream) -> None:
        """Run a decoupled model on a batch: each request gets a response sender that
        sends through `stream` (worker/decoupled.py BatchStream), during execute() or
        later from any thread. If execute() fails, every request not finished yet ends
        with the error; a request released without its final response ends with an
        error too (_RequestStream.__del__)."""
        sender = pb_utils.InferenceResponseSender
        requests = self._requests(batch)
        streams = []
        for index, (header, request) in enumerate(zip(batch.headers, requests)):
            request_stream = _RequestStream(self, stream, index, header.requested_outputs)
            request._response_sender = sender(request_stream)
            request._cancel_probe = request_stream.cancelled
            streams.append(request_stream)
        if batch.trace_contexts is not None:  # traced in mode opentelemetry
            pb_utils._set_trace_contexts(requests, batch.trace_contexts)
        running = pb_utils._RUNNING  # for BLS calls made with trace=request.trace()
        running.append((batch.batch_id, requests))
        try:
            self._execute_decoupled(requests, streams)
        finally:
            running.pop()

    def _execute_decoupled(self, requests: list, streams: list) -> None:
        """The model's execute() on decoupled requests (each with its _RequestStream in
        `streams`); a failure ends every request not final yet with it. The requests it
        released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE wait in `rescheduled`."""
        try:
            returned = self.model.execute(requests)
            if asyncio.iscoroutine(returned):
                returned = self._await(returned)
        except Exception as exc:
            text = (
                f"Failed to process the request(s) for model '{self.instance_name}', message: "
                f"{_describe(exc, self.model_path)}"
            )
            pb_utils.Logger.log_error(f"{text}\n{traceback.format_exc()}")
            _fail_open(streams, text)
            return
        if returned is not None:
            _fail_open(
                streams,
                f"Failed to process the request(s) for model '{self.instance_name}', message: Python "
                f"model '{self.instance_name}' is using the decoupled mode and the execute function "
                "must return None.",
            )
            return
        reschedule = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
        for request, request_stream in zip(requests, streams):
            if request._release_flags != reschedule:
                continue
            request._release_flags = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
            if not self.iterative:
                request_stream.stream.send(
                    request_stream.index,
                    self._failure(_NEEDS_ITERATIVE, pb_utils.TritonError.UNSUPPORTED),
                    True,
                )
            elif not request_stream.stream.is_final(request_stream.index):
                self.rescheduled.append((request, request_stream))

    def run_rescheduled(self) -> list:
        """Runs the requests rescheduled so far through execute() again, together, as
        Triton runs a rescheduled request in a later batch, each with its flags cleared
        and its control inputs refreshed (not the start of its sequence any more). A
        decoupled model's responses go out on the requests' own streams (the batches
        they came in stay open until their final response): returns []. Else returns,
        per request, its Rescheduled (where its answer goes) and its Result, or a
        Rescheduled when the model rescheduled it again (it waits again)."""
        waiting = list(self.rescheduled)
        self.rescheduled.clear()  # the same list: the worker loop holds it
        requests = [request for request, _ in waiting]
        controls = self.refresh_controls() if self.refresh_controls is not None else {}
        for request in requests:
            request._flags = 0
            if controls:
                request._inputs = [
                    pb_utils.Tensor(t.name(), controls[t.name()]) if t.name() in controls else t
                    for t in request._inputs
                ]
        if self.decoupled:
            self._execute_decoupled(requests, [target for _, target in waiting])
            return []
        results = self.execute_requests(requests)
        answers = []
        for (request, target), result in zip(waiting, results):
            if type(result) is Rescheduled:  # it waits again, answered where it was
                request._release_flags = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL
                self.rescheduled.append((request, target))
            answers.append((target, result))
        return answers

    def _failure(self, message: str, code: int = pb_utils.TritonError.INTERNAL) -> RequestError:
        return RequestError(
            f"Failed to process the request(s) for model '{self.instance_name}', message: {message}",
            code,
        )

    def _rescheduled_result(self, response) -> Result:
        """The result of a request (not decoupled) the model released with
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: a Rescheduled, which runs again; its
        entry in execute()'s list must be None, as Triton's Python backend asks."""
        if not self.iterative:
            return self._failure(_NEEDS_ITERATIVE, pb_utils.TritonError.UNSUPPORTED)
        if response is not None:
            return self._failure(
                "a request released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE must have "
                "None in the list execute() returns: its response comes from a later run"
            )
        return Rescheduled()

    def _result(self, request, response) -> Result:
        # Runs once per request: it reads the pb_utils objects' fields directly rather
        # than through their accessor methods.
        if request._release_flags == pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            return self._rescheduled_result(response)
        if response is None:
            return self._failure(
                "execute() returned None for this request, and sent it no response "
                "through its response sender"
            )
        error = response._error
        if error is not None:  # the model's own answer (a success in Triton's statistics)
            return RequestError(error.message(), error.code(), by_model=True)

        outputs = response._output_tensors
        requested = request._requested_output_names
        if len(outputs) > 1 or requested:
            # map() over the fields rather than comprehensions: no frame of their own.
            names = list(map(_name_of, outputs))
            seen = set(names)
            if len(seen) != len(names):
                duplicate = next(name for name in names if names.count(name) > 1)
                return self._failure(f"output '{duplicate}' appears more than once in the response")
            if requested and not (len(requested) == len(names) and seen.issuperset(requested)):
                missing = [name for name in requested if name not in seen]
                if missing:
                    names = ", ".join(f"'{name}'" for name in missing)
                    noun = "output" if len(missing) == 1 else "outputs"
                    return self._failure(f"requested {noun} {names} not produced by the model")
                wanted = self.kept_outputs.union(requested)
                outputs = [tensor for tensor in outputs if tensor._name in wanted]
        for tensor in outputs:
            if tensor._device_tensor is not None:
                return self._host_result(outputs, response._parameters_dict)
        # (name, array) pairs straight from the tensors: one C call per output.
        return Response(list(map(_pair_of, outputs)), response._parameters_dict)

    def _host_result(self, outputs, parameters) -> Result:
        """The Response of `outputs` some of which are on a device: results travel
        through the arena, in host memory."""
        pairs = []
        for tensor in outputs:
            array = tensor._array
            if tensor._device_tensor is not None:
                try:
                    array = tensor._host_array("output")
                except pb_utils.TritonModelException as exc:
                    return self._failure(str(exc))
            pairs.append((tensor._name, array))
        return Response(pairs, parameters)

    def finalize(self) -> None:
        """Call the model's finalize() once, if it has one."""
        if self._finalized:
            return
        self._finalized = True
        try:
            finalize = getattr(self.model, "finalize", None)
            if finalize is not None:
                self._await(finalize())
        finally:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.close()


class _Requested:
    """What `PythonModelBackend._result` reads of a request, without the request: a
    response stream must not keep its request (and the request its sender) alive."""

    __slots__ = ("_requested_output_names", "_release_flags")

    def __init__(self, requested_output_names):
        self._requested_output_names = requested_output_names
        self._release_flags = pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL


_NEEDS_ITERATIVE = (
    "request rescheduling (TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) needs "
    "sequence_batching { iterative_sequence: true } in the model's config"
)


def _fail_open(streams: list, message: str) -> None:
    """Ends each request of `streams` (its _RequestStream) not final yet with `message`."""
    for request_stream in streams:
        request_stream.stream.send(request_stream.index, RequestError(message), True)


class _RequestStream:
    """One request of a decoupled model: what its response sender sends through. It
    lives as long as the request or its sender; when both are gone without the final
    response, the request ends with an error so its client is not left waiting."""

    __slots__ = ("backend", "stream", "index", "requested")

    def __init__(self, backend, stream, index: int, requested_output_names):
        self.backend = backend
        self.stream = stream
        self.index = index
        self.requested = _Requested(requested_output_names)

    def send(self, response, final: bool) -> None:
        result = None if response is None else self.backend._result(self.requested, response)
        self.stream.send(self.index, result, final)

    def cancelled(self) -> bool:
        return self.stream.cancelled(self.index)

    def __del__(self):
        try:
            if not self.stream.is_final(self.index):
                backend = self.backend
                self.stream.send(
                    self.index,
                    RequestError(
                        f"Failed to process the request(s) for model '{backend.instance_name}', "
                        "message: the model released the request without sending a response "
                        "flagged TRITONSERVER_RESPONSE_COMPLETE_FINAL"
                    ),
                    True,
                )
        except Exception:  # never raise from a finalizer
            pass


class _SentResponse:
    """What a non-decoupled request's response sender got: its response, and `done` once
    the final flag came (or the sender was dropped without it)."""

    __slots__ = ("requested", "response", "final", "done")

    def __init__(self, requested_output_names):
        self.requested = _Requested(requested_output_names)
        self.response = None
        self.final = False
        self.done = threading.Event()


# Triton 2.51's words for what a model that is not decoupled cannot send.
_MORE_THAN_ONE = "Unable to send response. Non-decoupled model cannot send more than one response."
_FINAL_FIRST = (
    "Unable to send response. Non-decoupled model cannot send complete final before sending "
    "a response."
)


class _SingleResponseSender(pb_utils.InferenceResponseSender):
    """The response sender of a model that is not decoupled, as Triton's Python backend
    allows: one response, with the final flag or followed by it, from execute() or from
    a thread after it returned; the batch is answered once every such request has it."""

    def __init__(self, sent: _SentResponse, cancel_probe):
        self._sent = sent
        self._cancel_probe = cancel_probe
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        final = self._final(response, flags)
        sent = self._sent
        with self._lock:
            if response is not None:
                if sent.response is not None:
                    raise pb_utils.TritonModelException(_MORE_THAN_ONE)
                sent.response = response
            if final:
                if sent.response is None:
                    raise pb_utils.TritonModelException(_FINAL_FIRST)
                sent.final = True
                sent.done.set()

    def is_cancelled(self):
        probe = self._cancel_probe
        return False if probe is None else bool(probe())

    def __del__(self):
        self._sent.done.set()  # dropped: whatever it sent is all there will be
