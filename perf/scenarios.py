"""The benchmark scenarios: named, versioned definitions. Bump `version` whenever a change makes
old numbers incomparable (model, shapes, client flags); results carry `name@vN` and the regression
gate only compares equal keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MODELS = {
    # model name -> (inputs as {name: per-request shape}, backend)
    "add_sub": ({"INPUT0": (16,), "INPUT1": (16,)}, "python"),
    "identity_fp32": ({"INPUT0": (3, 224, 224)}, "python"),
    "add_sub_onnx": ({"INPUT0": (16,), "INPUT1": (16,)}, "onnxruntime"),
    # the ONNX example of model_repository/ (perf/models/mlp_onnx links to it)
    "mlp_onnx": ({"INPUT": (16,)}, "onnxruntime"),
    # the conv classifier example (perf/models/conv_onnx links to it): model compute dominates
    "conv_onnx": ({"INPUT": (3, 64, 64)}, "onnxruntime"),
    # Pipelines (issue 13): an ensemble of two Python models, a BLS model calling add_sub.
    "ensemble_add_sub": ({"INPUT0": (16,), "INPUT1": (16,)}, "python"),
    "bls_add_sub": ({"INPUT0": (16,), "INPUT1": (16,)}, "python"),
}
# model -> bytes of one request's largest output, where it is not the size of INPUT0
_OUTPUT_BYTES = {"mlp_onnx": 10 * 4, "conv_onnx": 10 * 4}
_SESSIONS: dict = {}


def _onnx_reference(model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if model not in _SESSIONS:
        import onnxruntime as ort

        path = Path(__file__).resolve().parent / "models" / model / "1" / "model.onnx"
        _SESSIONS[model] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    session = _SESSIONS[model]
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs)))


# model -> the models it calls, copied into the benchmark repository with it.
DEPENDS = {"ensemble_add_sub": ("add_sub",), "bls_add_sub": ("add_sub",)}


def reference(model: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the model must answer: used both to check a server and as the in-process limit."""
    if model == "ensemble_add_sub":  # add_sub twice: (a + b) + (a - b), (a + b) - (a - b)
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": (a + b) + (a - b), "OUTPUT1": (a + b) - (a - b)}
    if model in ("add_sub", "add_sub_onnx", "bls_add_sub"):
        a, b = inputs["INPUT0"], inputs["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
    if model in ("mlp_onnx", "conv_onnx"):
        return _onnx_reference(model, inputs)
    if model == "identity_fp32":
        # The model returns its input; in-process the least work that yields an output tensor
        # the caller owns is one copy.
        return {"OUTPUT0": inputs["INPUT0"].copy()}
    raise KeyError(model)


@dataclass(frozen=True)
class Scenario:
    name: str
    version: int
    model: str
    protocol: str  # "http" | "grpc"
    concurrency: tuple[int, ...]
    shm: str = "none"  # "none" | "system"
    description: str = ""
    extra_args: tuple[str, ...] = field(default=())
    # "perf_analyzer"; "wrk": a light client (perf/wrk_load.py) sending one fixed
    # add_sub request, `body` "binary" (tritonclient's) or "json" (plain KServe v2);
    # "h2load": a light gRPC client (perf/h2load_load.py) posting one fixed ModelInfer
    client: str = "perf_analyzer"
    body: str = "binary"

    @property
    def key(self) -> str:
        return f"{self.name}@v{self.version}"

    @property
    def backend(self) -> str:
        return MODELS[self.model][1]

    def output_bytes(self) -> int:
        # perf_analyzer's --output-shared-memory-size: the largest output of one request.
        if self.model in _OUTPUT_BYTES:
            return _OUTPUT_BYTES[self.model]
        shape = MODELS[self.model][0]["INPUT0"]
        return int(np.prod(shape)) * 4

    def in_band_bytes(self) -> int:
        """Bytes each way of a large-tensor scenario whose tensors travel in the request and
        the response (no shared memory): measured against the loopback echo limit
        (perf/echo_limit.py). 0 for the others."""
        if self.shm != "none" or self.model != "identity_fp32":
            return 0
        return self.output_bytes()

    def needs(self) -> set[str]:
        """Server features the scenario needs (see bench.probe_features)."""
        features = {self.protocol, f"backend:{self.backend}"}
        if self.shm == "system":
            features.add("shm:system")
        return features


SCENARIOS: list[Scenario] = [
    Scenario(
        "add_sub_http",
        2,  # v2: max_queue_delay_microseconds 100 (issue 4's setting)
        "add_sub",
        "http",
        (1, 8, 32),
        description="add_sub (Python backend, FP32 [16] x2, dynamic batching with a 100 us queue "
        "delay) over HTTP, binary tensors",
    ),
    Scenario(
        "add_sub_grpc",
        2,  # v2: max_queue_delay_microseconds 100 (issue 4's setting)
        "add_sub",
        "grpc",
        (1, 8, 32),
        description="add_sub over gRPC",
    ),
    Scenario(
        "add_sub_grpc_shm",
        2,  # v2: max_queue_delay_microseconds 100 (issue 4's setting)
        "add_sub",
        "grpc",
        (1, 8, 32),
        shm="system",
        description="add_sub over gRPC with inputs and outputs in system shared memory",
    ),
    Scenario(
        "identity_fp32_http",
        1,
        "identity_fp32",
        "http",
        (4,),
        description="identity on FP32 [3,224,224] (602 KB each way) over HTTP, binary tensors",
    ),
    Scenario(
        "identity_fp32_grpc",
        1,
        "identity_fp32",
        "grpc",
        (4,),
        description="identity on FP32 [3,224,224] (602 KB each way) over gRPC, raw contents",
    ),
    Scenario(
        "identity_fp32_shm",
        1,
        "identity_fp32",
        "http",
        (4,),
        shm="system",
        description="identity on FP32 [3,224,224] with tensors in system shared memory (HTTP control)",
    ),
    Scenario(
        "identity_fp32_grpc_shm",
        1,
        "identity_fp32",
        "grpc",
        (4,),
        shm="system",
        description="identity on FP32 [3,224,224] with tensors in system shared memory over gRPC",
    ),
    Scenario(
        "add_sub_http_json",
        1,
        "add_sub",
        "http",
        (1, 8),
        description="add_sub over HTTP with JSON tensors in and out (perf_analyzer "
        "--input-tensor-format=json --output-tensor-format=json)",
        extra_args=("--input-tensor-format=json", "--output-tensor-format=json"),
    ),
    Scenario(
        "add_sub_wrk_json",
        1,
        "add_sub",
        "http",
        (8,),
        description="add_sub, one plain KServe v2 JSON request (JSON data in, JSON outputs) "
        "sent by wrk -t1",
        client="wrk",
        body="json",
    ),
    Scenario(
        "add_sub_wrk_binary",
        1,
        "add_sub",
        "http",
        (8, 64),
        description="add_sub, tritonclient's binary request sent by wrk -t1: server capacity "
        "with a light client",
        client="wrk",
        body="binary",
    ),
    Scenario(
        "add_sub_onnx_http",
        1,
        "add_sub_onnx",
        "http",
        (1, 8, 32),
        description="add_sub as an ONNX graph (onnxruntime backend) with dynamic batching, over HTTP",
    ),
    Scenario(
        "mlp_onnx_http",
        1,
        "mlp_onnx",
        "http",
        (1, 16),
        description="the ONNX example (model_repository/mlp_onnx: MLP 16-32-10, onnxruntime "
        "backend, dynamic batching, 100 us queue delay) over HTTP, binary tensors",
    ),
    Scenario(
        "conv_onnx_http",
        2,  # v1: a lighter model (22 M multiply-adds per image)
        "conv_onnx",
        "http",
        (16,),
        description="the conv classifier example (model_repository/conv_onnx: FP32 "
        "[3,64,64] -> [10], ~155 M multiply-adds per image, onnxruntime backend, dynamic "
        "batching) over HTTP, binary tensors",
    ),
]

SCENARIOS += [
    Scenario(
        "ensemble_add_sub_http",
        1,
        "ensemble_add_sub",
        "http",
        (8,),
        description="an ensemble of two Python models (add_sub, then add_sub on its outputs) "
        "over HTTP, binary tensors",
    ),
    Scenario(
        "ensemble_add_sub_grpc",
        1,
        "ensemble_add_sub",
        "grpc",
        (8,),
        description="the same ensemble of two Python models over gRPC ModelInfer",
    ),
    Scenario(
        "bls_add_sub_http",
        1,
        "bls_add_sub",
        "http",
        (8,),
        description="a Python model calling add_sub through BLS (async_exec per request of "
        "its batch) over HTTP, binary tensors",
    ),
]

# gRPC capacity with a light client (issue 40), as the wrk scenarios measure HTTP's.
SCENARIOS += [
    Scenario(
        "add_sub_h2load",
        1,
        "add_sub",
        "grpc",
        (8, 64),
        description="add_sub, one ModelInfer request (raw contents) posted by h2load -t1 over "
        "as many HTTP/2 connections as the concurrency, one stream each",
        client="h2load",
    ),
    Scenario(
        "identity_fp32_h2load",
        1,
        "identity_fp32",
        "grpc",
        (4,),
        description="identity on FP32 [1,3,224,224] (602 KB each way), one ModelInfer request "
        "(raw contents) posted by h2load -t1, 4 connections",
        client="h2load",
    ),
]

BY_NAME = {s.name: s for s in SCENARIOS}


def select(names: list[str] | None) -> list[Scenario]:
    if not names:
        return list(SCENARIOS)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(BY_NAME)}")
    return [BY_NAME[n] for n in names]
