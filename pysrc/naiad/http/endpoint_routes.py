"""The SageMaker and Vertex AI endpoints (--allow-sagemaker, --allow-vertex-ai) as
Triton 2.51 serves them, each on a port of its own.

Their connections are the C++ I/O loop's (csrc/http1/endpoint_routes.h): it rewrites
each request to the KServe route Triton's endpoint server hands it to, so an infer is
read by the same reader as on the HTTP port, and routes the endpoint answers by itself
(an unknown path, the multi-model endpoint's list) to `/v2/naiad/endpoint_reply/<status>`,
served here. This module reads the settings Triton reads (flags and environment) and
opens the ports."""

from __future__ import annotations

import os
from dataclasses import dataclass

from naiad import _core
from naiad.errors import NaiadError
from naiad.http.routes import TEXT, HttpRequest, Reply, exception_reply

__all__ = [
    "Endpoint",
    "EndpointError",
    "endpoint_metrics",
    "endpoint_reply",
    "endpoints_for",
    "resolve_vertex_model",
    "safe_port_range_error",
]

# What /invocations infers when SAGEMAKER_TRITON_DEFAULT_MODEL_NAME is not set: a name
# no model has, so the request fails as Triton's does.
SAGEMAKER_UNSPECIFIED_MODEL = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
_BODY_HEADER = _core.ENDPOINT_BODY_HEADER.lower()
_MODEL_HEADER = _core.ENDPOINT_MODEL_HEADER.lower()
_VERSION_HEADER = _core.ENDPOINT_VERSION_HEADER.lower()
_NAME_HEADER = _core.ENDPOINT_NAME_HEADER.lower()
_TARGET_HEADER = _core.SAGEMAKER_TARGET_HEADER.lower()


class EndpointError(ValueError):
    """An endpoint cannot start as configured; the message is Triton's where it has one,
    `service` the endpoint's name in Triton's "failed to start <service> service"."""

    def __init__(self, message: str, service: str = "Vertex AI"):
        super().__init__(message)
        self.service = service


@dataclass
class Endpoint:
    kind: str  # "sagemaker" or "vertex_ai"
    name: str  # as the start-up log says it
    port: int
    model: str  # Vertex AI: "" until resolve_vertex_model
    ping_mode: str = "ready"
    predict_route: str = ""
    health_route: str = ""
    # SageMaker: the multi-model endpoint's control plane (http/sagemaker_models.py).
    models: object = None


def endpoint_reply(request: HttpRequest, status_text: str, manager) -> Reply:
    """An endpoint's own answer: the status the C++ rewrite put in the path, the body it
    put in the header (text/plain, as Triton's endpoint servers send it). An infer
    refused for its binary Content-Type names its model: Triton looks the model up
    first, so an unknown one gets the infer route's 404 instead."""
    if not status_text.isdigit() or not 200 <= int(status_text) <= 599:
        return Reply(404, TEXT, (b'{"error":"Not Found"}',))
    model = request.headers.get(_MODEL_HEADER)
    if model is not None:
        try:
            manager.get(model, request.headers.get(_VERSION_HEADER, ""))
        except NaiadError as exc:
            return exception_reply(exc)
    body = request.headers.get(_BODY_HEADER, "")
    return Reply(int(status_text), TEXT, (body.encode("latin-1"),) if body else ())


def endpoint_metrics(request: HttpRequest, metrics_text) -> Reply:
    """The Vertex AI redirect to "metrics": the metrics port's page (`metrics_text()`),
    or Triton's empty 400 when the server has no metrics (--allow-metrics=false)."""
    if metrics_text is None:
        return Reply(400, TEXT, ())
    return Reply(200, TEXT, (metrics_text(),))


def wanted_headers() -> dict:
    """The headers the protocol must keep for endpoint_reply and the multi-model
    endpoint's control plane."""
    names = (_BODY_HEADER, _MODEL_HEADER, _VERSION_HEADER, _NAME_HEADER, _TARGET_HEADER)
    return {name: name for name in names}


def endpoints_for(options, environ=os.environ) -> list[Endpoint]:
    """The endpoints `options` (naiad serve's) and the environment ask for."""
    endpoints = []
    if getattr(options, "allow_sagemaker", None):
        ping_mode = environ.get("SAGEMAKER_TRITON_PING_MODE", "ready")
        if ping_mode not in ("ready", "live"):
            raise EndpointError(
                f"SAGEMAKER_TRITON_PING_MODE='{ping_mode}': expected 'ready' or 'live'",
                "Sagemaker",
            )
        port = getattr(options, "sagemaker_port", None)
        if port is None:
            port = 8080
        model = environ.get("SAGEMAKER_TRITON_DEFAULT_MODEL_NAME", SAGEMAKER_UNSPECIFIED_MODEL)
        endpoints.append(Endpoint("sagemaker", "Sagemaker", port, model, ping_mode=ping_mode))
    if vertex_allowed(options, environ):
        predict = environ.get("AIP_PREDICT_ROUTE", "")
        health = environ.get("AIP_HEALTH_ROUTE", "")
        if not predict:
            # Triton's message, its typo included.
            raise EndpointError("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not health:
            raise EndpointError("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        endpoints.append(
            Endpoint(
                "vertex_ai",
                "Vertex AI",
                vertex_port(options, environ),
                "",
                predict_route=predict,
                health_route=health,
            )
        )
    return endpoints


def vertex_allowed(options, environ=os.environ) -> bool:
    """--allow-vertex-ai, whose default is true where AIP_MODE=PREDICTION (Triton's)."""
    allowed = getattr(options, "allow_vertex_ai", None)
    if allowed is None:
        return environ.get("AIP_MODE") == "PREDICTION"
    return allowed


def vertex_port(options, environ=os.environ) -> int:
    """--vertex-ai-port, else AIP_HTTP_PORT, else 8080 (Triton's)."""
    port = getattr(options, "vertex_ai_port", None)
    return int(environ.get("AIP_HTTP_PORT", "8080")) if port is None else port


def resolve_vertex_model(requested: str | None, ready_models: list[str]) -> str:
    """The Vertex AI endpoint's default model: --vertex-ai-default-model, which must be
    loaded, or the repository's one model (VertexAiAPIServer::Create)."""
    if not requested:
        if len(ready_models) != 1:
            raise EndpointError(
                "Expect the model repository contains only a single model if default model "
                "is not specified"
            )
        return ready_models[0]
    if requested not in ready_models:
        raise EndpointError(f"Expect the default model '{requested}' is loaded")
    return requested


def safe_port_range_error(text: str | None, ports: list[tuple[str, int]]) -> str | None:
    """--sagemaker-safe-port-range: the other endpoints' ports (name, port) must lie in
    it; Triton's message for the first that does not, else None."""
    if not text:
        return None
    low, high = (int(part) for part in text.split("-", 1))
    for name, port in ports:
        if not low <= port <= high:
            return (
                f"The server cannot listen to {name} requests at port {port}, allowed port "
                f"range is [{low}, {high}]"
            )
    return None
