"""The GRPCInferenceService methods (and grpc.health.v1.Health/Check) over the manager.

Each unary method takes the request message bytes and returns the response message
(or raises GrpcError / NaiadError); ModelInfer returns a future the protocol waits on.
They call the same manager methods as the HTTP routes (naiad/http/routes.py), so both
front ends answer from one source. Status codes and messages are Triton 2.51's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from naiad.errors import InvalidArgument, NaiadError, NotFound, Unavailable
from naiad.flags.restrictions import Restrictions, add_forwarded
from naiad.grpc import shm_rpcs, status
from naiad.grpc.status import GrpcError
from naiad.grpc.tensors import to_infer_request, to_infer_response
from naiad.observability import triton_log
from naiad.protos import grpc_service_pb2 as pb
from naiad.scheduling.instance import send_log_settings
from naiad.scheduling.model import DECOUPLED_GRPC_INFER
from naiad.tracing.otel import tracestate_text
from naiad.tracing.settings import update_from_grpc

log = logging.getLogger("naiad.grpc")

SERVICE = "/inference.GRPCInferenceService/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
STREAM_INFER = SERVICE + "ModelStreamInfer"
MODEL_INFER = SERVICE + "ModelInfer"


def parse(message_class, data: bytes):
    message = message_class()
    try:
        message.ParseFromString(data)
    except DecodeError:
        # grpc++'s own words when a request does not deserialize (Triton answers so).
        raise GrpcError(status.INTERNAL, "Unable to parse request") from None
    return message


class Service:
    def __init__(self, manager, restrictions: Restrictions | None = None, forward=None):
        self.manager = manager
        self.restrictions = restrictions or Restrictions()
        self.forward = forward  # --grpc-header-forward-pattern, compiled, or None
        # path -> (request class, handler(request message) -> response message | future)
        self.unary: dict[str, tuple[type | None, Callable]] = {
            SERVICE + "ServerLive": (pb.ServerLiveRequest, self.server_live),
            SERVICE + "ServerReady": (pb.ServerReadyRequest, self.server_ready),
            SERVICE + "ModelReady": (pb.ModelReadyRequest, self.model_ready),
            SERVICE + "ServerMetadata": (pb.ServerMetadataRequest, self.server_metadata),
            SERVICE + "ModelMetadata": (pb.ModelMetadataRequest, self.model_metadata),
            SERVICE + "ModelConfig": (pb.ModelConfigRequest, self.model_config),
            SERVICE + "ModelStatistics": (pb.ModelStatisticsRequest, self.model_statistics),
            SERVICE + "ModelInfer": (pb.ModelInferRequest, self.model_infer),
            SERVICE + "RepositoryIndex": (pb.RepositoryIndexRequest, self.repository_index),
            SERVICE + "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, self.load),
            SERVICE + "RepositoryModelUnload": (pb.RepositoryModelUnloadRequest, self.unload),
            SERVICE + "SystemSharedMemoryStatus": (
                pb.SystemSharedMemoryStatusRequest,
                self.system_shm_status,
            ),
            SERVICE + "SystemSharedMemoryRegister": (
                pb.SystemSharedMemoryRegisterRequest,
                self.system_shm_register,
            ),
            SERVICE + "SystemSharedMemoryUnregister": (
                pb.SystemSharedMemoryUnregisterRequest,
                self.system_shm_unregister,
            ),
            SERVICE + "CudaSharedMemoryStatus": (
                pb.CudaSharedMemoryStatusRequest,
                self.cuda_shm_status,
            ),
            SERVICE + "CudaSharedMemoryRegister": (
                pb.CudaSharedMemoryRegisterRequest,
                self.cuda_shm_register,
            ),
            SERVICE + "CudaSharedMemoryUnregister": (
                pb.CudaSharedMemoryUnregisterRequest,
                self.cuda_shm_unregister,
            ),
            SERVICE + "TraceSetting": (pb.TraceSettingRequest, self.trace_setting),
            SERVICE + "LogSettings": (pb.LogSettingsRequest, self.log_settings),
            HEALTH_CHECK: (None, self.health_check),
        }

    # -- health and metadata ---------------------------------------------------------
    def server_live(self, request):
        return pb.ServerLiveResponse(live=self.manager.server_live())

    def server_ready(self, request):
        return pb.ServerReadyResponse(ready=self.manager.server_ready())

    def model_ready(self, request):
        # Triton answers ready: false, not an error, for an unknown model or version.
        return pb.ModelReadyResponse(ready=self.manager.model_ready(request.name, request.version))

    def server_metadata(self, request):
        return json_format.ParseDict(self.manager.server_metadata(), pb.ServerMetadataResponse())

    def model_metadata(self, request):
        model = self.manager.get(request.name, request.version)
        return json_format.ParseDict(model.metadata(), pb.ModelMetadataResponse())

    def model_config(self, request):
        model = self.manager.get(request.name, request.version)
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(model.config)
        return response

    def model_statistics(self, request):
        name, version = request.name, request.version
        try:
            stats = self.manager.statistics(name, version)
        except (NotFound, Unavailable):
            # Triton's statistics words these its own way, as INVALID_ARGUMENT.
            if version and self.manager.model_ready(name):
                message = f"requested model version is not available for model '{name}'"
            else:
                message = f"requested model '{name}' is not available"
            raise GrpcError(status.INVALID_ARGUMENT, message) from None
        return json_format.ParseDict(
            stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True
        )

    def health_check(self, data: bytes) -> bytes:
        # grpc.health.v1.HealthCheckResponse{status: SERVING (1) | NOT_SERVING (2)},
        # written by hand: one varint field, for any service name asked about.
        return b"\x08\x01" if self.manager.server_ready() else b"\x08\x02"

    # -- repository ------------------------------------------------------------------
    def repository_index(self, request):
        # The manager's entries, as the HTTP extension answers them (Triton's fields).
        response = pb.RepositoryIndexResponse()
        for entry in self.manager.repository_index(request.ready):
            response.models.add(**entry)
        return response

    def load(self, request):
        """Loads or reloads a model as the HTTP extension does (model control)."""
        parameters = {}
        for key, value in request.parameters.items():
            kind = value.WhichOneof("parameter_choice")
            if kind is not None:
                parameters[key] = getattr(value, kind)
        if isinstance(parameters.get("config"), bytes):
            parameters["config"] = parameters["config"].decode("utf-8", "replace")
        future = asyncio.ensure_future(self.manager.load_model(request.model_name, parameters))
        return future, _Empty(pb.RepositoryModelLoadResponse)

    def unload(self, request):
        parameter = request.parameters.get("unload_dependents")
        dependents = (
            parameter is not None
            and parameter.WhichOneof("parameter_choice") == ("bool_param")
            and parameter.bool_param
        )
        future = asyncio.ensure_future(self.manager.unload_model(request.model_name, dependents))
        return future, _Empty(pb.RepositoryModelUnloadResponse)

    # -- shared memory (naiad/memory/shm.py through grpc/shm_rpcs.py) ---------------------------
    def system_shm_status(self, request):
        return shm_rpcs.system_status(self.manager, request)

    def system_shm_register(self, request):
        return shm_rpcs.system_register(self.manager, request)

    def system_shm_unregister(self, request):
        return shm_rpcs.system_unregister(self.manager, request)

    def cuda_shm_status(self, request):
        return shm_rpcs.cuda_status(self.manager, request)

    def cuda_shm_register(self, request):
        return shm_rpcs.cuda_register(self.manager, request)

    def cuda_shm_unregister(self, request):
        return shm_rpcs.cuda_unregister(self.manager, request)

    # -- trace settings: not built yet; log settings (observability/triton_log.py) --------------
    def trace_setting(self, request):
        # The rules are tracing/settings.py's; each value goes back as a string list.
        settings = self.manager.tracer.settings
        model = request.model_name
        if model and not self.manager.model_ready(model):
            raise InvalidArgument(f"Request for unknown model : {model}")
        if request.settings:
            settings.update(model, update_from_grpc(request.settings))
        response = pb.TraceSettingResponse()
        for key, value in settings.get(model).to_json().items():
            values = value if isinstance(value, list) else [value]
            response.settings[key].value.extend(values)
        return response

    def log_settings(self, request):
        settings = {
            name: (value.WhichOneof("parameter_choice"), _setting_content(value))
            for name, value in request.settings.items()
        }
        try:
            if settings:
                triton_log.update(settings, grpc=True)
        finally:
            applied = send_log_settings()  # what was applied before a refused setting too
        # Answered once the workers follow the change (as the HTTP route).
        return applied, _log_settings_response

    # -- inference -------------------------------------------------------------------
    def model_infer(self, message, forwarded=None, context=None):
        """Submits the request; returns (future, finish) where finish(future) gives the
        ModelInferResponse or raises. `forwarded`: call metadata for the model;
        `context`: the call's (traceparent, tracestate), in trace mode opentelemetry."""
        request = to_infer_request(message)
        if forwarded:
            add_forwarded(request, forwarded)
        if context is not None:
            request.traceparent, tracestate = context
            request.tracestate = tracestate_text(tracestate, exact=True)
        model = self.manager.get(request.model_name, request.model_version)
        if getattr(model, "decoupled", False):
            raise GrpcError(status.UNIMPLEMENTED, DECOUPLED_GRPC_INFER)
        future = model.submit(request)
        return future, InferFinisher(model, request)


def _setting_content(value):
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


def _log_settings_response(_applied) -> pb.LogSettingsResponse:
    """finish(future) of a LogSettings call: the server's settings, once applied."""
    response = pb.LogSettingsResponse()
    for name, value in triton_log.settings().items():
        field = {bool: "bool_param", int: "uint32_param", str: "string_param"}[type(value)]
        setattr(response.settings[name], field, value)
    return response


class _Empty:
    """finish(future) for a control call: its error, or an empty response message."""

    __slots__ = ("message_class",)

    def __init__(self, message_class):
        self.message_class = message_class

    def __call__(self, future):
        future.result()  # raises the call's error
        return self.message_class()


class InferFinisher:
    __slots__ = ("model", "request")

    def __init__(self, model, request):
        self.model = model
        self.request = request

    def __call__(self, future) -> pb.ModelInferResponse:
        response = future.result()  # raises the request's error
        config = getattr(self.model, "config", None)
        batching = config is None or config.max_batch_size > 0
        return to_infer_response(
            response, self.request, batching, getattr(self.model, "labels", None)
        )


def error_of(exc: BaseException) -> tuple[int, str]:
    if not isinstance(exc, (GrpcError, NaiadError)):
        log.exception("unhandled error in a gRPC method", exc_info=exc)
    return status.status_of(exc)
