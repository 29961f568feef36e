"""What Naiad does with each field of model_config.proto: honoured, refused, or warned.

A field a config sets that Naiad does not act on must never be skipped in silence: the model
would load and behave differently from Triton. So every field path of ModelConfig has one
entry in FIELDS below (tests/test_field_support.py walks the proto descriptor and fails on a
field without one):

- honoured: Naiad acts on it as Triton 2.51 does (possibly only on some backends, with
  another decision on the rest);
- refused: a model that sets it does not load; the reason names the field;
- warned: a pure hint or optimisation that cannot change results (Triton's backends may
  ignore it too); the model loads, and the log and the repository index say it is ignored.

An entry on a message field decides its whole subtree; a message without an entry is looked
into, field by field. "Sets" means what protobuf sees as present: a scalar different from its
default, a non-empty repeated field or map, a sub-message written in the config. The rules run
on the completed config, so a default Naiad fills itself (pinned buffers on) must be honoured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from naiad.protos import model_config_pb2

HONOURED = "honoured"
REFUSED = "refused"
WARNED = "warned"

ModelConfig = model_config_pb2.ModelConfig


@dataclasses.dataclass(frozen=True)
class Support:
    """One field's decision. `backends`: when not empty, the field is honoured only by these
    backends (the config's `backend`, else its `platform`) and gets `elsewhere` on the
    rest. `applies`: when given, the field counts as set only where it returns True for
    (value, config). `message`: Triton's own refusal text where Triton refuses the field
    too (formatted with `model`), used instead of Naiad's."""

    decision: str
    why: str
    backends: frozenset[str] = frozenset()
    elsewhere: str = REFUSED
    applies: Callable | None = None
    message: Callable | None = None

    def decision_for(self, backend: str) -> str:
        if not self.backends or backend in self.backends:
            return self.decision
        return self.elsewhere


def _honoured(why: str) -> Support:
    return Support(HONOURED, why)


def _refused(why: str, **kwargs) -> Support:
    return Support(REFUSED, why, **kwargs)


def _warned(why: str, **kwargs) -> Support:
    return Support(WARNED, why, **kwargs)


def _only(backends: set[str], why: str, elsewhere: str = REFUSED, **kwargs) -> Support:
    return Support(HONOURED, why, frozenset(backends), elsewhere, **kwargs)


def _runtime_is_not_default(value: str, config: ModelConfig) -> bool:
    # Triton's default runtime is the backend's own library; naming it changes nothing.
    # A Python-based backend's is its model.py, which Triton writes in such a model's
    # config itself (naiad.backends.python_based).
    if value == "model.py":
        from naiad.backends import python_based_model_file

        return python_based_model_file(config.backend) is None
    return value not in ("", f"libtriton_{config.backend}.so")


def _pinned_disabled(value, config: ModelConfig) -> bool:
    # Naiad fills `enable: true` itself (as Triton does); only turning it off is a request.
    return not value.enable


# Triton 2.51's words where it refuses the field too (checked against it).
def _triton_shape_tensors(config: ModelConfig) -> str:
    return f"shape tensors are only supported for TensorRT platform for {config.name}"


def _triton_non_linear(config: ModelConfig) -> str:
    return f"Non-linear IO format is only supported for the TensorRT platform for {config.name}"


def _triton_profile(config: ModelConfig) -> str:
    group = next(g for g in config.instance_group if g.profile)
    return (
        # No space after the platform: Triton's own string has none.
        f"instance group {group.name} of model {config.name} and platform {config.platform}"
        "specifies profile field which is only supported for TensorRT models"
    )


_ONNX = {"onnxruntime", "onnxruntime_onnx"}
_TENSORRT = {"tensorrt", "tensorrt_plan"}
_HINT = "a performance hint that cannot change results"
# The backends that honour batch_input / batch_output (ragged batching).
_BATCH_IO = {*_ONNX, "pytorch", "pytorch_libtorch", "python"}

# Field path (ModelConfig's field names joined by '.', map values like repeated messages)
# -> what Naiad does with it. The one table: docs/model_config.md says it in prose.
FIELDS: dict[str, Support] = {
    "name": _honoured("must equal the folder name, as in Triton"),
    "platform": _honoured("selects the backend (onnxruntime_onnx, pytorch_libtorch, ...)"),
    "backend": _honoured(
        "selects the backend: python, onnxruntime, pytorch, tensorrt, or a Python-based "
        "backend (<backend-directory>/<backend>/model.py)"
    ),
    "runtime": _refused(
        "Naiad runs its own backends and loads no backend library or runtime; only the "
        "backend's default (libtriton_<backend>.so, or model.py for a Python-based "
        "backend) is accepted",
        applies=_runtime_is_not_default,
    ),
    "version_policy": _honoured("latest / all / specific, as in Triton"),
    "max_batch_size": _honoured("batching and the batch dimension"),
    "input.name": _honoured("request validation"),
    "input.data_type": _honoured("request validation"),
    "input.format": _honoured(
        "checked as Triton does (an image format needs three dims) and reported in the config "
        "for clients; no backend reads more from it"
    ),
    "input.dims": _honoured("request validation"),
    "input.reshape": _honoured("the shape handed to the backend"),
    "input.is_shape_tensor": _only(
        _TENSORRT,
        "shape tensors exist only in TensorRT engines",
        message=_triton_shape_tensors,
    ),
    "input.allow_ragged_batch": _honoured("requests of different shapes share a batch"),
    "input.optional": _honoured("a request may omit the input"),
    "input.is_non_linear_format_io": _only(
        _TENSORRT,
        "non-linear IO formats exist only in TensorRT engines",
        message=_triton_non_linear,
    ),
    "output.name": _honoured("the outputs a model returns"),
    "output.data_type": _honoured("the outputs a model returns"),
    "output.dims": _honoured("the outputs a model returns"),
    "output.reshape": _honoured("the shape returned to the client"),
    "output.label_filename": _honoured("classification results (the classification extension)"),
    "output.is_shape_tensor": _only(
        _TENSORRT,
        "shape tensors exist only in TensorRT engines",
        message=_triton_shape_tensors,
    ),
    "output.is_non_linear_format_io": _only(
        _TENSORRT,
        "non-linear IO formats exist only in TensorRT engines",
        message=_triton_non_linear,
    ),
    "batch_input": _only(
        _BATCH_IO,
        "computed for each batch and given to onnxruntime and pytorch models "
        "(backends/batch_io.py); a Python model's requests do not get them, as in Triton",
    ),
    "batch_output": _only(
        _BATCH_IO,
        "scattered back to the requests by their source input's shape for onnxruntime and "
        "pytorch models; a Python model answers each request itself, as in Triton",
    ),
    "optimization.graph": _only(_ONNX, "onnxruntime's graph optimization level", elsewhere=WARNED),
    "optimization.priority": _warned(f"the CUDA stream priority: {_HINT}"),
    "optimization.cuda": _warned(
        f"CUDA graphs, busy-wait events and the output copy stream of TensorRT: {_HINT}; "
        "Naiad captures no CUDA graphs"
    ),
    "optimization.execution_accelerators": _only(
        _ONNX,
        "onnxruntime's execution providers (TensorRT, CUDA, OpenVINO); Triton's other "
        "backends ignore it too",
        elsewhere=WARNED,
    ),
    "optimization.input_pinned_memory": _warned(
        f"pinned input buffers: {_HINT}; Naiad's arenas are pinned where CUDA is present",
        applies=_pinned_disabled,
    ),
    "optimization.output_pinned_memory": _warned(
        f"pinned output buffers: {_HINT}; Naiad's arenas are pinned where CUDA is present",
        applies=_pinned_disabled,
    ),
    "optimization.gather_kernel_buffer_threshold": _warned(
        f"TensorRT's input gather kernel: {_HINT}"
    ),
    "optimization.eager_batching": _warned(
        f"TensorRT's eager batching: {_HINT}; the dynamic batcher decides when a batch leaves"
    ),
    "dynamic_batching": _honoured("the core's dynamic batcher: sizes, delay, priorities, queues"),
    "sequence_batching.direct": _honoured("the direct strategy of the sequence batcher"),
    "sequence_batching.oldest": _honoured("the oldest strategy of the sequence batcher"),
    "sequence_batching.max_sequence_idle_microseconds": _honoured("idle sequences are released"),
    "sequence_batching.control_input": _honoured("control tensors given to the model"),
    "sequence_batching.state.input_name": _honoured("implicit state"),
    "sequence_batching.state.output_name": _honoured("implicit state"),
    "sequence_batching.state.data_type": _honoured("implicit state"),
    "sequence_batching.state.dims": _honoured("implicit state"),
    "sequence_batching.state.initial_state": _honoured("implicit state's initial value"),
    "sequence_batching.state.use_same_buffer_for_input_output": _warned(
        f"one buffer for a state's input and output: {_HINT}"
    ),
    "sequence_batching.state.use_growable_memory": _warned(f"growable state buffers: {_HINT}"),
    "sequence_batching.iterative_sequence": _only(
        {"python"},
        "a Python model's request released with "
        "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE runs again (backends/python.py); other "
        "backends cannot reschedule a request",
    ),
    "ensemble_scheduling.step.model_name": _honoured("the ensemble's steps"),
    "ensemble_scheduling.step.model_version": _honoured("the ensemble's steps"),
    "ensemble_scheduling.step.input_map": _honoured("the ensemble's steps"),
    "ensemble_scheduling.step.output_map": _honoured("the ensemble's steps"),
    "ensemble_scheduling.step.model_namespace": _refused(
        "Naiad has no model namespaces for a step to name"
    ),
    "ensemble_scheduling.max_inflight_requests": _refused(
        "Naiad does not bound an ensemble's requests in flight (and Triton 2.51 has no such field)"
    ),
    "instance_group.name": _honoured("instance names"),
    "instance_group.kind": _honoured("CPU / GPU / AUTO / MODEL placement"),
    "instance_group.count": _honoured("worker processes per group"),
    "instance_group.rate_limiter": _honoured("the rate limiter (--rate-limit)"),
    "instance_group.gpus": _honoured("the GPUs instances run on"),
    "instance_group.secondary_devices": _refused("Naiad has no NVDLA or other secondary device"),
    "instance_group.profile": _only(
        _TENSORRT, "TensorRT's optimization profiles", message=_triton_profile
    ),
    "instance_group.passive": _refused(
        "Naiad sends requests to every instance; a passive one would get them too"
    ),
    "instance_group.host_policy": _warned(
        f"the host policy (NUMA binding) of the instances: {_HINT}"
    ),
    "default_model_filename": _honoured("the file each backend loads"),
    "cc_model_filenames": _only(_TENSORRT, "the engine file per compute capability"),
    "metric_tags": _warned("Triton reserves it and reads it nowhere; neither does Naiad"),
    "parameters": _honoured("handed to the backend (and Naiad's own worker limits)"),
    "model_warmup": _honoured("warm-up requests before an instance is ready"),
    "model_operations": _only(
        _ONNX,
        "onnxruntime's custom operator libraries; Triton's other backends ignore it too",
        elsewhere=WARNED,
    ),
    "model_transaction_policy": _honoured("decoupled models"),
    "model_repository_agents": _honoured(
        "the 'checksum' agent (repository/agents.py); any other agent is refused there"
    ),
    "response_cache": _honoured("the response cache (--cache-config)"),
    "model_metrics": _refused(
        "Naiad keeps Triton's histogram buckets and has no per-model metric control (Triton "
        "2.51's own parser rejects the field)"
    ),
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """A field a config sets that Naiad refuses or only warns about."""

    path: str
    decision: str
    text: str


def findings(config: ModelConfig) -> list[Finding]:
    """The refused and warned fields `config` sets, once per path, in declaration order."""
    backend = config.backend or config.platform
    if backend and backend not in _BATCH_IO:
        from naiad.backends import python_based_model_file

        if python_based_model_file(backend) is not None:
            # A Python-based backend's models run on the Python backend, as in Triton.
            backend = "python"
    found: dict[str, Finding] = {}
    _walk(config, "", config, backend, found)
    return list(found.values())


def refusal(config: ModelConfig) -> str | None:
    """Why `config` cannot load because of a field Naiad refuses, or None."""
    for finding in findings(config):
        if finding.decision == REFUSED:
            return finding.text
    return None


def warnings(config: ModelConfig) -> list[str]:
    """What the log and the repository index say about the hints `config` sets."""
    return [f.text for f in findings(config) if f.decision == WARNED]


def _walk(message, prefix: str, config: ModelConfig, backend: str, found: dict) -> None:
    for field, value in message.ListFields():
        path = prefix + field.name
        support = FIELDS.get(path)
        if support is not None:
            if support.applies is None or support.applies(value, config):
                decision = support.decision_for(backend)
                if decision != HONOURED and path not in found:
                    found[path] = Finding(path, decision, _text(path, support, decision, config))
            continue
        if field.message_type is None:
            # A leaf without an entry: the table's test keeps this from happening; refusing
            # it is the safe side.
            found.setdefault(
                path,
                Finding(path, REFUSED, _text(path, _refused("not in the table"), REFUSED, config)),
            )
            continue
        for item in _messages(field, value):
            _walk(item, path + ".", config, backend, found)


def _messages(field, value) -> list:
    if field.message_type.GetOptions().map_entry:
        return list(value.values())
    if isinstance(value, (list, tuple)) or hasattr(value, "add"):
        return list(value)
    return [value]


def _text(path: str, support: Support, decision: str, config: ModelConfig) -> str:
    model = config.name
    if decision == REFUSED:
        if support.message is not None:
            return support.message(config)
        where = f" by backend '{config.backend or config.platform}'" if support.backends else ""
        return f"field '{path}' of model '{model}' is not supported{where}: {support.why}"
    where = f" by backend '{config.backend or config.platform}'" if support.backends else ""
    return f"field '{path}' of model '{model}' is ignored{where}: {support.why}"
