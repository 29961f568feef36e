"""Naiad's own endpoints under /v2/naiad (not part of Triton's protocol)."""

from __future__ import annotations

from naiad import _core
from naiad.http.endpoint_routes import endpoint_metrics, endpoint_reply, wanted_headers
from naiad.http.routes import HttpRequest, Reply, Router, error_reply, json_reply

_REPORTS = {"arena": "arena_stats", "lanes": "lane_stats", "io_loops": "io_loop_stats"}
# /v2/naiad/endpoint_reply/<status>: the SageMaker and Vertex AI endpoints' own answers.
_ENDPOINT_REPLY = _core.ENDPOINT_REPLY_PATH.split("/")[3]
# /v2/naiad/endpoint_metrics: the Vertex AI endpoint's redirect to "metrics".
_ENDPOINT_METRICS = _core.ENDPOINT_METRICS_PATH.split("/")[3]
# /v2/naiad/sagemaker_models: the SageMaker multi-model endpoint's control requests.
_SAGEMAKER_MODELS = _core.SAGEMAKER_MODELS_PATH.split("/")[3]


def register_naiad_routes(
    router: Router, manager, metrics_text=None, sagemaker_models=None
) -> None:
    """`metrics_text`: a callable giving the metrics page, None without metrics;
    `sagemaker_models`: the SageMaker endpoint's (http/sagemaker_models.py), if served."""

    def handle(request: HttpRequest, parts: list) -> Reply:
        # /v2/naiad/arena: the shared-memory arena's use, to spot leaks.
        # /v2/naiad/lanes: requests taken by the infer fast lane and the general path.
        # /v2/naiad/io_loops: the connections each C++ I/O loop served.
        if len(parts) == 5 and parts[3] == _ENDPOINT_REPLY:
            return endpoint_reply(request, parts[4], manager)
        if len(parts) == 4 and parts[3] == _ENDPOINT_METRICS:
            return endpoint_metrics(request, metrics_text)
        if len(parts) == 4 and parts[3] == _SAGEMAKER_MODELS and sagemaker_models is not None:
            return sagemaker_models.handle(request)
        if len(parts) == 4 and parts[3] == "shm" and request.method == "GET":
            return json_reply(manager.shm.stats())  # shm copy counters (naiad/memory/shm.py)
        report = _REPORTS.get(parts[3]) if len(parts) == 4 else None
        if report is None:
            return error_reply(404, "Not Found")
        if request.method != "GET":
            return error_reply(405, "Method Not Allowed")
        return json_reply(getattr(manager, report)())

    router.wanted_headers.update(wanted_headers())
    router.register("naiad", handle)
