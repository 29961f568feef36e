"""ONNX Runtime backend: `backend: "onnxruntime"` / `platform: "onnxruntime_onnx"`.

One `InferenceSession` per model instance, built with the session options Triton's
onnxruntime backend reads from the model config (`optimization.graph.level`, the
`parameters` `intra_op_thread_count`, `inter_op_thread_count`, `execution_mode`,
`enable_mem_arena`, `enable_mem_pattern`, `session.*` entries) and its execution providers:
CPU by default; on a `KIND_GPU` instance CUDA, with TensorRT first when
`optimization { execution_accelerators { gpu_execution_accelerator [{name: "tensorrt"}] } }`
asks for it. At load the session's inputs and outputs are checked against the config with
the rules (and wording) of Triton's onnxruntime backend.

Data path: the worker hands the batch's inputs as whole batch-major `[N, ...]` arrays over
the shared arena (`Batch.tensors`). On the CPU provider they go to `session.run` as they
are: ONNX Runtime wraps a contiguous numpy array of the right dtype without copying, so it
reads the arena in place. On a GPU instance they are bound with IOBinding
(`bind_cpu_input`: one host-to-device copy).

Outputs, on the CPU provider: when every output's shape follows from the batch size and
the config dims (a batching model, fixed dims, no BYTES) and the worker offers it
(`Batch.reserve`), the batch's response block is laid out before the run and each output
is bound with IOBinding over its batch-major run in that block: onnxruntime writes the
output once, where the reply is read from (`_run_in_place`). Otherwise (and on a GPU
instance, where they come back to host memory) outputs are numpy arrays over ORT's own
buffers, each request gets its rows as a view and the worker copies them once into the
response block. BYTES inputs are decoded to str (ONNX strings are text; bytes that are
not UTF-8 are replaced).

`auto_complete_config(config, model_dir)` is the auto-complete hook
(naiad.repository.autocomplete), with the rules of Triton's onnxruntime backend.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from naiad import datatypes
from naiad.backends import sequence_io
from naiad.backends.base import Backend, Batch, RequestError, Response
from naiad.backends.batch_io import BatchIO
from naiad.backends.tensors import device_pieces, ragged_join
from naiad.triton_codes import INTERNAL, INVALID_ARG

# Triton's --backend-config=onnxruntime,default-max-batch-size default (tritonserver sets 4).
DEFAULT_MAX_BATCH_SIZE = 4

# ONNX tensor type (as onnxruntime names it) -> model config data type.
_CONFIG_OF_ORT = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
}
_SUPPORTED_CONFIG_TYPES = frozenset(_CONFIG_OF_ORT.values())
# Config data type -> numpy dtype an input is fed as (BYTES: object array of str).
_NUMPY_OF_CONFIG = {
    d.config_name: d.numpy for d in datatypes.DATATYPES.values() if d.numpy is not None
}

_ORT_ERROR = re.compile(r"^\[ONNXRuntimeError\] : (\d+) : \w+ : (.*)$", re.S)


class OnnxModelError(Exception):
    """A model that cannot be served; `message` is what the server reports."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def ort_message(exc: BaseException) -> str:
    """An onnxruntime exception as Triton's onnxruntime backend words it:
    `onnx runtime error <code>: <message>`."""
    text = str(exc)
    match = _ORT_ERROR.match(text)
    if match:
        return f"onnx runtime error {match.group(1)}: {match.group(2)}"
    return f"onnx runtime error: {text}"


def _import_ort():
    try:
        import onnxruntime
    except ImportError as exc:  # a regular dependency; only a broken install lacks it
        raise OnnxModelError(
            f"the onnxruntime backend needs the 'onnxruntime' package ({exc}); "
            "install it with `pip install onnxruntime` (or onnxruntime-gpu on a GPU host)"
        ) from None
    return onnxruntime


def model_path(config: dict, model_dir: Path | str, version: str | int) -> Path:
    """The ONNX file of a version: `<model>/<version>/<default_model_filename or
    model.onnx>`, or `model.onnx` inside it when that is a folder (as Triton)."""
    filename = config.get("default_model_filename") or "model.onnx"
    path = Path(model_dir) / str(version) / filename
    if path.is_dir():
        path = path / "model.onnx"
    return path


def _shape(dims) -> list[int]:
    """onnxruntime's shape (ints, names of symbolic dims, None) with every dim that is not
    a fixed size as -1, as Triton reads it."""
    if dims is None:
        return []
    return [d if isinstance(d, int) and d >= 0 else -1 for d in dims]


def _shape_str(dims) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _parameter(config: dict, key: str) -> str | None:
    value = (config.get("parameters") or {}).get(key)
    if value is None:
        return None
    if isinstance(value, dict):
        return str(value.get("string_value", ""))
    return str(value)


def _int_parameter(config: dict, key: str) -> int:
    text = _parameter(config, key)
    if text is None or text == "":
        return 0
    try:
        return int(text)
    except ValueError:
        raise OnnxModelError(
            f"failed to convert '{key}' parameter value '{text}' to an integer"
        ) from None


def _bool_parameter(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "on", "yes"):
        return True
    if lowered in ("false", "0", "off", "no"):
        return False
    raise OnnxModelError(f"failed to convert '{key}' parameter value '{text}' to a bool")


def session_options(config: dict):
    """The SessionOptions Triton's onnxruntime backend builds from a model config."""
    ort = _import_ort()
    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    graph = (config.get("optimization") or {}).get("graph") or {}
    graph_level = int(graph.get("level", 0) or 0)
    if graph_level == -1:
        level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    elif graph_level == 1:
        level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    elif graph_level == 2:
        level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.graph_optimization_level = level
    mode = _int_parameter(config, "execution_mode")
    if mode not in (0, 1):
        raise OnnxModelError(
            "Invalid configuration value provided. Expected values for  execution_mode "
            f"are 0 or 1 but got {mode} ."
        )
    options.execution_mode = (
        ort.ExecutionMode.ORT_SEQUENTIAL if mode == 0 else ort.ExecutionMode.ORT_PARALLEL
    )
    intra = _int_parameter(config, "intra_op_thread_count")
    if intra > 0:
        options.intra_op_num_threads = intra
    inter = _int_parameter(config, "inter_op_thread_count")
    if inter > 0:
        options.inter_op_num_threads = inter
    key = "session.use_device_allocator_for_initializers"
    value = _parameter(config, key)
    if value is not None:
        options.add_session_config_entry(key, value)
    value = _parameter(config, "enable_mem_arena")
    if value is not None:
        options.enable_cpu_mem_arena = _bool_parameter("enable_mem_arena", value)
    value = _parameter(config, "enable_mem_pattern")
    if value is not None:
        options.enable_mem_pattern = _bool_parameter("enable_mem_pattern", value)
    for library in (config.get("model_operations") or {}).get("op_library_filename", []):
        options.register_custom_ops_library(library)
    return options


# gpu_execution_accelerator "tensorrt" parameters -> TensorRT EP options (as Triton maps them).
_TRT_PARAMETERS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_max_partition_iterations": "trt_max_partition_iterations",
    "trt_min_subgraph_size": "trt_min_subgraph_size",
    "int8_calibration_table_name": "trt_int8_calibration_table_name",
    "int8_use_native_calibration_table": "trt_int8_use_native_calibration_table",
    "trt_dla_enable": "trt_dla_enable",
    "trt_dla_core": "trt_dla_core",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
    "trt_engine_cache_prefix": "trt_engine_cache_prefix",
    "trt_dump_subgraphs": "trt_dump_subgraphs",
    "trt_force_sequential_engine_build": "trt_force_sequential_engine_build",
    "trt_context_memory_sharing_enable": "trt_context_memory_sharing_enable",
    "trt_layer_norm_fp32_fallback": "trt_layer_norm_fp32_fallback",
    "trt_timing_cache_enable": "trt_timing_cache_enable",
    "trt_timing_cache_path": "trt_timing_cache_path",
    "trt_force_timing_cache": "trt_force_timing_cache",
    "trt_detailed_build_log": "trt_detailed_build_log",
    "trt_build_heuristics_enable": "trt_build_heuristics_enable",
    "trt_sparsity_enable": "trt_sparsity_enable",
    "trt_builder_optimization_level": "trt_builder_optimization_level",
    "trt_auxiliary_streams": "trt_auxiliary_streams",
    "trt_tactic_sources": "trt_tactic_sources",
    "trt_extra_plugin_lib_paths": "trt_extra_plugin_lib_paths",
    "trt_profile_min_shapes": "trt_profile_min_shapes",
    "trt_profile_max_shapes": "trt_profile_max_shapes",
    "trt_profile_opt_shapes": "trt_profile_opt_shapes",
    "trt_cuda_graph_enable": "trt_cuda_graph_enable",
    "trt_dump_ep_context_model": "trt_dump_ep_context_model",
    "trt_ep_context_file_path": "trt_ep_context_file_path",
    "trt_ep_context_embed_mode": "trt_ep_context_embed_mode",
}
# The parameters of the deprecated CUDA EP settings read from the config's `parameters`.
_CUDNN_SEARCH = {0: "EXHAUSTIVE", 1: "HEURISTIC", 2: "DEFAULT"}
_ARENA_EXTEND = {0: "kNextPowerOfTwo", 1: "kSameAsRequested"}


def execution_providers(config: dict, kind: str, device_id: int) -> list:
    """[(provider name, options), ...] for an instance of `kind` (CPU, GPU, MODEL, AUTO)
    on `device_id`, from the config's execution accelerators, as Triton's onnxruntime
    backend chooses them. The CPU provider always comes last."""
    accelerators = (config.get("optimization") or {}).get("execution_accelerators") or {}
    providers = []
    if kind in ("GPU", "AUTO"):
        cuda: dict[str, str] = {}
        for accelerator in accelerators.get("gpu_execution_accelerator", []):
            name = accelerator.get("name", "")
            params = accelerator.get("parameters") or {}
            if name == "tensorrt":
                trt = {"device_id": str(device_id)}
                for key, value in params.items():
                    if key == "precision_mode":
                        if value == "FP16":
                            trt["trt_fp16_enable"] = "1"
                        elif value == "BF16":
                            trt["trt_bf16_enable"] = "1"
                        elif value == "INT8":
                            trt["trt_int8_enable"] = "1"
                        elif value != "FP32":
                            raise OnnxModelError(
                                f"unsupported precision mode '{value}' is requested"
                            )
                    elif key in _TRT_PARAMETERS:
                        trt[_TRT_PARAMETERS[key]] = str(value)
                    else:
                        raise OnnxModelError(
                            f"unknown parameter '{key}' is provided for TensorRT Execution "
                            "Accelerator"
                        )
                providers.append(("TensorrtExecutionProvider", trt))
            elif name == "cuda":
                cuda.update({key: str(value) for key, value in params.items() if value != ""})
            else:
                raise OnnxModelError(f"unknown Execution Accelerator '{name}' is requested")
        cuda["device_id"] = str(device_id)
        search = _parameter(config, "cudnn_conv_algo_search")
        if search is not None:
            number = _int_parameter(config, "cudnn_conv_algo_search")
            if number not in _CUDNN_SEARCH:
                raise OnnxModelError(
                    f"unsupported cudnn_conv_algo_search value '{number}' is requested"
                )
            cuda["cudnn_conv_algo_search"] = _CUDNN_SEARCH[number]
        limit = _parameter(config, "gpu_mem_limit")
        if limit is not None:
            cuda["gpu_mem_limit"] = limit
        extend = _parameter(config, "arena_extend_strategy")
        if extend is not None:
            number = _int_parameter(config, "arena_extend_strategy")
            if number not in _ARENA_EXTEND:
                raise OnnxModelError(
                    f"unsupported arena_extend_strategy value '{number}' is requested"
                )
            cuda["arena_extend_strategy"] = _ARENA_EXTEND[number]
        copy = _parameter(config, "do_copy_in_default_stream")
        if copy is not None:
            cuda["do_copy_in_default_stream"] = copy
        providers.append(("CUDAExecutionProvider", cuda))
    for accelerator in accelerators.get("cpu_execution_accelerator", []):
        name = accelerator.get("name", "")
        if name == "openvino":
            providers.append(("OpenVINOExecutionProvider", {"device_type": "CPU"}))
        else:
            raise OnnxModelError(f"unknown Execution Accelerator '{name}' is requested")
    providers.append(("CPUExecutionProvider", {}))
    return providers


def create_session(path: Path, config: dict, kind: str = "CPU", device_id: int = 0):
    """An InferenceSession for `path` with the config's options and providers.
    OnnxModelError naming the file when it is missing, unreadable or refused by ORT."""
    ort = _import_ort()
    options = session_options(config)
    providers = execution_providers(config, kind, device_id)
    available = set(ort.get_available_providers())
    missing = [name for name, _ in providers if name not in available]
    if missing and kind == "GPU":
        raise OnnxModelError(
            f"execution provider {', '.join(missing)} requested for a KIND_GPU instance is "
            f"not available in this onnxruntime build (available: "
            f"{', '.join(sorted(available))}); install onnxruntime-gpu (`pip install "
            "naiad[gpu]`)"
        )
    providers = [(name, opts) for name, opts in providers if name in available]
    try:
        return ort.InferenceSession(
            str(path),
            sess_options=options,
            providers=[name for name, _ in providers],
            provider_options=[opts for _, opts in providers],
        )
    except Exception as exc:
        message = ort_message(exc)
        if str(path) not in message:
            message += f" (model file {path})"
        raise OnnxModelError(message) from None


def _io_infos(nodes) -> dict:
    """name -> (config data type, shape with -1 for variable dims), in the model's order."""
    return {
        node.name: (_CONFIG_OF_ORT.get(node.type, "TYPE_INVALID"), _shape(node.shape))
        for node in nodes
    }


def _check_served_types(session, model: str, path) -> None:
    """OnnxModelError for a model input or output whose type Naiad cannot carry: one with
    no Triton datatype (sequences, maps, complex, float8, ...) or BF16 (no numpy dtype)."""
    for kind, nodes in (("input", session.get_inputs()), ("output", session.get_outputs())):
        for node in nodes:
            config_type = _CONFIG_OF_ORT.get(node.type)
            if config_type is None or config_type not in _NUMPY_OF_CONFIG:
                shown = config_type or f"{node.type} (no Triton datatype)"
                raise OnnxModelError(
                    f"unsupported datatype {shown} for {kind} '{node.name}' for model "
                    f"'{model}' (model file {path})"
                )


def _tensor_dims(io: dict) -> list[int]:
    reshape = io.get("reshape")
    if reshape is not None:
        return [int(d) for d in reshape.get("shape", [])]
    return [int(d) for d in io.get("dims", [])]


def _compare_dims(model, tensor, model_shape, dims, max_batch_size, exact) -> None:
    """Triton onnxruntime backend's CompareDimsSupported."""
    if max_batch_size > 0:
        if not model_shape or model_shape[0] != -1:
            raise OnnxModelError(
                f"model '{model}', tensor '{tensor}': for the model to support batching the "
                "shape should have at least 1 dimension and the first dimension must be -1; "
                f"but shape expected by the model is {_shape_str(model_shape)}"
            )
        full = [-1, *dims]
        ok = len(model_shape) == len(full) and all(
            m == f for m, f in zip(model_shape, full) if exact or m != -1
        )
        if not ok:
            raise OnnxModelError(
                f"model '{model}', tensor '{tensor}': the model expects {len(model_shape)} "
                f"dimensions (shape {_shape_str(model_shape)}) but the model configuration "
                f"specifies {len(full)} dimensions (an initial batch dimension because "
                "max_batch_size > 0 followed by the explicit tensor shape, making complete "
                f"shape {_shape_str(full)})"
            )
        return
    ok = len(model_shape) == len(dims) and all(
        m == d for m, d in zip(model_shape, dims) if exact or m != -1
    )
    if not ok:
        raise OnnxModelError(
            f"model '{model}', tensor '{tensor}': the model expects {len(model_shape)} "
            f"dimensions (shape {_shape_str(model_shape)}) but the model configuration "
            f"specifies {len(dims)} dimensions (shape {_shape_str(dims)})"
        )


# Config data type -> the ONNX type name Triton's onnxruntime backend words it with
# (OnnxDataTypeName); the others are the config name without TYPE_.
_ONNX_TYPE_NAMES = {
    "TYPE_FP16": "FLOAT16",
    "TYPE_FP32": "FLOAT",
    "TYPE_FP64": "DOUBLE",
    "TYPE_BF16": "BFLOAT16",
    "TYPE_STRING": "STRING",
}


def _onnx_type_name(config_type: str) -> str:
    if config_type == "TYPE_INVALID":
        return "UNDEFINED"
    return _ONNX_TYPE_NAMES.get(config_type, config_type.removeprefix("TYPE_"))


def _validate_controls(config: dict, inputs: dict, model: str, max_batch_size: int) -> int:
    """Triton's ValidateBooleanSequenceControl / ValidateTypedSequenceControl: each
    sequence control is a model input of dims [1] (after the batch dimension) and the
    control's datatype. Returns how many there are."""
    controls = sequence_io.controls(config)
    by_kind = {control.kind: control for control in controls}
    for kind in sequence_io.KINDS:
        control = by_kind.get(kind)
        if control is None:
            continue
        info = inputs.get(control.name)
        if info is None:
            raise OnnxModelError(
                f"configuration specified sequence control '{control.name}', but model does "
                "not provide that input"
            )
        model_type, model_shape = info
        dims = model_shape[1:] if max_batch_size > 0 else model_shape
        if dims != [1]:
            raise OnnxModelError(
                f"unable to load model '{model}', sequence control '{control.name}' in model "
                f"has dims {_shape_str(dims)} but dims [1] is expected"
            )
        if model_type != control.data_type:
            raise OnnxModelError(
                f"unable to load model '{model}', sequence control '{control.name}', the "
                f"model expects data-type {_onnx_type_name(model_type)} but the model "
                f"configuration specifies data-type {control.data_type}"
            )
    return len(controls)


def _validate_states(config: dict, inputs: dict, outputs: dict, model: str) -> None:
    """Each implicit state's input and output are the model's, of the state's datatype.
    (Triton counts the state inputs and finds a wrong name or type only when a request
    runs: this refuses that model at load, with the reason.)"""
    for state in sequence_io.states(config):
        for kind, name, infos in (
            ("input", state.input_name, inputs),
            ("output", state.output_name, outputs),
        ):
            info = infos.get(name)
            if info is None:
                allowed = ", ".join(sorted(infos))
                raise OnnxModelError(
                    f"unexpected inference {kind} state '{name}', allowed {kind}s are: {allowed}"
                )
            if info[0] != state.data_type:
                raise OnnxModelError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{state.data_type} for {kind} state '{name}', model provides {info[0]}"
                )


def validate_session(session, config: dict) -> None:
    """The checks of Triton's onnxruntime backend (ValidateInputs / ValidateOutputs):
    counts, names, data types and dims of the config against the model; for a sequence
    model its control inputs first, and its state inputs counted."""
    model = config.get("name", "")
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    inputs = _io_infos(session.get_inputs())
    outputs = _io_infos(session.get_outputs())
    configured = config.get("input", [])
    expected = len(configured) + len(config.get("batch_input", []))
    scattered = BatchIO(config).scatter_sources
    if "sequence_batching" in config:
        expected += _validate_controls(config, inputs, model, max_batch_size)
        expected += len(sequence_io.states(config))
    if len(inputs) != expected:
        raise OnnxModelError(
            f"unable to load model '{model}', configuration expects {expected} inputs, "
            f"model provides {len(inputs)}"
        )
    for kind, ios, infos in (
        ("input", configured, inputs),
        ("output", config.get("output", []), outputs),
    ):
        for io in ios:
            name = io.get("name", "")
            datatype = io.get("data_type", "TYPE_INVALID")
            if kind == "input" and io.get("optional") and max_batch_size != 0:
                raise OnnxModelError(
                    f"unable to load model '{model}', optional input '{name}' is not "
                    "supported for models that support batching"
                )
            info = infos.get(name)
            if info is None:
                allowed = ", ".join(sorted(infos))
                raise OnnxModelError(
                    f"unexpected inference {kind} '{name}', allowed {kind}s are: {allowed}"
                )
            if datatype not in _SUPPORTED_CONFIG_TYPES:
                raise OnnxModelError(
                    f"unsupported datatype {datatype} for {kind} '{name}' for model '{model}'"
                )
            model_type, model_shape = info
            if datatype != model_type:
                raise OnnxModelError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{datatype} for {kind} '{name}', model provides {model_type}"
                )
            dims = _tensor_dims(io)
            if kind == "input" and io.get("allow_ragged_batch"):
                # Triton's check: a ragged input reaches the model as one 1-D tensor.
                if model_shape != [-1]:
                    raise OnnxModelError(
                        f"unable to load model '{model}', configuration expects model "
                        f"provides input with shape [-1]  for ragged input '{name}', model "
                        f"provides {_shape_str(model_shape)}"
                    )
            elif kind == "output" and name in scattered:
                pass  # a batch output's shape is its source input's, not the config's
            elif model_shape:
                _compare_dims(model, name, model_shape, dims, max_batch_size, kind == "output")
            elif any(d != 1 for d in dims):
                raise OnnxModelError(
                    f"unable to load model '{model}', scalar tensor '{name}', should only "
                    "provide 1 in the model configuration when the model doesn't support "
                    f"batching. Model configuration provided: {_shape_str(dims)}."
                )
    if "sequence_batching" in config:
        _validate_states(config, inputs, outputs, model)


class _PlacedOutput:
    """An output onnxruntime can write straight into the response block: its shape is
    [batch, *dims] with every dim fixed by the config."""

    __slots__ = ("name", "spec", "dtype", "wire_dims", "model_dims")

    def __init__(self, io: dict):
        self.name = io["name"]
        self.dtype = _NUMPY_OF_CONFIG[io["data_type"]]
        self.wire_dims = tuple(int(d) for d in io.get("dims", []))  # what the client sees
        self.model_dims = _tensor_dims(io)  # what the model produces (reshape)
        row_bytes = self.dtype.itemsize * int(np.prod(self.wire_dims, dtype=np.int64))
        # What WorkerEndpoint.reserve_response takes for it.
        self.spec = (self.name, io["data_type"][len("TYPE_") :], self.wire_dims, row_bytes)


def _placed_outputs(config: dict, max_batch_size: int) -> dict | None:
    """name -> _PlacedOutput for each output of a batching model that can be written in
    place: fixed dims and fixed-size elements (not BYTES). None when the model does not
    batch (its shapes do not follow from a batch size)."""
    if max_batch_size <= 0:
        return None
    placed = {}
    for io in config.get("output", []):
        dims = [*io.get("dims", []), *_tensor_dims(io)]
        if io.get("data_type") in _NUMPY_OF_CONFIG and io["data_type"] != "TYPE_STRING":
            if all(d >= 0 for d in dims):
                placed[io["name"]] = _PlacedOutput(io)
    return placed


class OnnxRuntimeBackend(Backend):
    """One instance of an ONNX model: its session and how to feed it."""

    batch_tensors = True  # the worker fills Batch.tensors (batch-major arrays by name)
    places_outputs = True  # outputs written into the response block (Batch.reserve)

    def __init__(self, args: dict):
        config = json.loads(args["model_config"])
        self.config = config
        self.name = args.get("model_name") or config.get("name", "")
        self.max_batch_size = int(config.get("max_batch_size", 0) or 0)
        path = model_path(config, args["model_repository"], args.get("model_version", "1"))
        self.path = path
        if not path.exists():
            raise OnnxModelError(
                f"unable to find '{path}' for model instance '{args.get('model_instance_name', self.name)}'"
            )
        kind = args.get("model_instance_kind", "CPU")
        device = int(args.get("model_instance_device_id", "0") or 0)
        self.session = create_session(path, config, kind, device)
        try:
            validate_session(self.session, config)
            _check_served_types(self.session, self.name, path)
        except OnnxModelError as exc:
            if str(path) in exc.message:
                raise
            raise OnnxModelError(f"{exc.message} (model file {path})") from None
        self.device = "cuda" if kind == "GPU" else "cpu"
        if kind == "GPU" and "CUDAExecutionProvider" not in self.session.get_providers():
            # onnxruntime falls back to the CPU when the CUDA provider cannot start (a
            # missing CUDA or cuDNN library): a KIND_GPU instance must not run there.
            raise OnnxModelError(
                f"failed to enable the CUDA execution provider for model instance "
                f"'{args.get('model_instance_name', self.name)}' on GPU {device} (providers "
                f"in use: {', '.join(self.session.get_providers())}; see onnxruntime's log "
                f"for the missing library) (model file {path})"
            )
        self.device_id = device
        # Inputs: name -> numpy dtype they are fed as; reshape targets (without batch dim).
        self.input_dtypes = {
            io["name"]: _NUMPY_OF_CONFIG[io["data_type"]] for io in config.get("input", [])
        }
        # A sequence model's control and state inputs (worker/sequence.py feeds them).
        for control in sequence_io.controls(config):
            self.input_dtypes[control.name] = _NUMPY_OF_CONFIG[control.data_type]
        states = sequence_io.states(config)
        for state in states:
            self.input_dtypes[state.input_name] = _NUMPY_OF_CONFIG[state.data_type]
        self.reshapes = {
            io["name"]: [int(d) for d in io["reshape"].get("shape", [])]
            for io in config.get("input", [])
            if io.get("reshape") is not None
        }
        self.output_names = [io["name"] for io in config.get("output", [])] or [
            node.name for node in self.session.get_outputs()
        ]
        # The state outputs run too: the sequence's next state (worker/sequence.py).
        self.output_names += [
            s.output_name for s in states if s.output_name not in self.output_names
        ]
        self.output_reshapes = {
            io["name"]: [int(d) for d in io.get("dims", [])]
            for io in config.get("output", [])
            if io.get("reshape") is not None
        }
        if self.max_batch_size == 0:
            # Scalars (shape []) in the model: as Triton, a scalar input is fed with no
            # dims whatever the request's [1], and a scalar output gets the config's dims.
            self.reshapes.update(
                {node.name: [] for node in self.session.get_inputs() if node.shape == []}
            )
            dims = {
                io["name"]: [int(d) for d in io.get("dims", [])] for io in config.get("output", [])
            }
            self.output_reshapes.update(
                {
                    node.name: dims.get(node.name, [1])
                    for node in self.session.get_outputs()
                    if node.shape == []
                }
            )
        self.string_inputs = {
            name for name, dtype in self.input_dtypes.items() if dtype == np.object_
        }
        self.binding = self.session.io_binding()
        # Ragged inputs, batch inputs and batch outputs (backends/batch_io.py).
        self.batch_io = BatchIO(config)
        # Outputs whose shape follows from the batch size and the config dims.
        fixed_outputs = _placed_outputs(config, self.max_batch_size)
        if fixed_outputs is not None:
            for name in self.batch_io.scatter_sources:
                fixed_outputs.pop(name, None)
        # A ragged batch's rows are not its requests' rows: no outputs written in place.
        self.placed_outputs = (
            fixed_outputs
            if self.device == "cpu" and not self.string_inputs and not self.batch_io
            else None
        )
        # On the CUDA provider: CUDA shared-memory inputs on this device are bound in
        # place (Batch.device_inputs) and outputs bound for such regions stay on it, or
        # are written straight into the region when their shape is known
        # (`fixed_outputs`): `_run_on_device`.
        self.device_inputs = self.device == "cuda" and not self.string_inputs
        self.fixed_outputs = fixed_outputs or {}
        # RunOptions entries Triton's onnxruntime backend reads from `parameters`.
        self.run_options = None
        shrinkage = _parameter(config, "memory.enable_memory_arena_shrinkage")
        if shrinkage is not None:
            self.run_options = _import_ort().RunOptions()
            try:
                self.run_options.add_run_config_entry(
                    "memory.enable_memory_arena_shrinkage", shrinkage
                )
            except Exception as exc:
                raise OnnxModelError(ort_message(exc)) from None
        self._bind_output, self._run_binding = self._binding_calls()

    # -- execution ------------------------------------------------------------------------
    def _feeds(self, batch: Batch) -> dict:
        """The session's inputs for the whole batch: the batch-major arrays over the arena
        where the worker gave them (no copy), else the requests' inputs joined."""
        tensors = batch.tensors
        feeds = {}
        headers = batch.headers
        ragged = self.batch_io.ragged
        for index, (name, _datatype, _shape) in enumerate(headers[0].inputs):
            array = tensors.get(name)
            if name in ragged:
                array = ragged_join(array, [arrays[index] for arrays in batch.arrays])
            elif array is None:
                parts = [arrays[index] for arrays in batch.arrays]
                if len(parts) == 1:
                    array = parts[0]
                elif self.max_batch_size > 0:
                    array = np.concatenate(parts)
                else:
                    raise RuntimeError("a model without batching got a batch of requests")
            if name in self.string_inputs:
                array = (
                    np.vectorize(
                        lambda item: (
                            item.decode("utf-8", "replace") if isinstance(item, bytes) else item
                        ),
                        otypes=[object],
                    )(array)
                    if array.size
                    else array.astype(object)
                )
            reshape = self.reshapes.get(name)
            if reshape is not None and name not in ragged:
                lead = [array.shape[0]] if self.max_batch_size > 0 else []
                array = array.reshape([*lead, *reshape])
            feeds[name] = array
        if self.batch_io.inputs:
            feeds.update(self.batch_io.batch_inputs(headers))
        return feeds

    def execute(self, batch: Batch) -> list:
        try:
            feeds = self._feeds(batch)
        except Exception as exc:
            message = f"failed to prepare the inputs of model '{self.name}': {exc}"
            return [RequestError(message, INVALID_ARG)] * len(batch)
        if batch.reserve is not None and self.placed_outputs is not None:
            results = self._run_in_place(batch, feeds)
            if results is not None:
                return results
        try:
            if self.device_inputs and (batch.device_inputs or batch.output_targets):
                outputs = self._run_on_device(batch, feeds)
            else:
                outputs = self._run(feeds)
        except Exception as exc:
            return [RequestError(ort_message(exc), INTERNAL)] * len(batch)
        return self._split(batch, outputs)

    def _run(self, feeds: dict) -> list:
        if self.device == "cpu" or self.string_inputs:
            # On the CPU provider, run() wraps each contiguous numpy input of the right
            # dtype as an OrtValue over its memory (here: the arena) and returns outputs
            # as numpy arrays over ORT's own buffers: no host copy either way, and less
            # per-call overhead than rebinding an IOBinding.
            return self.session.run(self.output_names, feeds, self.run_options)
        # GPU: inputs bound from host memory go to the device once; outputs come back
        # to host memory, where the worker writes them into the response block.
        binding = self.binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        for name in self.output_names:
            binding.bind_output(name, "cpu")
        try:
            self.session.run_with_iobinding(binding, self.run_options)
        except Exception:
            # IOBinding's errors lack ORT's status code: run again the plain way, which
            # raises the same error with it (Triton's "onnx runtime error N: ...").
            return self.session.run(self.output_names, feeds, self.run_options)
        return [value.numpy() for value in binding.get_outputs()]

    def _run_on_device(self, batch: Batch, feeds: dict) -> list:
        """A GPU batch with tensors in the client's CUDA shared memory (on this device),
        through IOBinding: such an input is bound in place (`bind_input` over the
        client's device pointer; a batch of several requests joins them on the device
        first), the other inputs from the host. An output every request placed in a CUDA
        region here is bound on the device: into the client's region itself when it is
        one request's, of a shape known before the run, and fits (returned as
        `target.written`, so the worker copies nothing), else where onnxruntime
        allocates it (a DeviceArray the worker copies device to device). Other outputs
        come back to the host. An error is raised as onnxruntime gives it."""
        from naiad.memory import cuda_ipc

        ort = _import_ort()
        binding = self.binding
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        device = self.device_id
        joined = []  # OrtValues holding joined inputs until the run is over
        for index, (name, array) in enumerate(feeds.items()):
            pieces = device_pieces(batch, index, name)
            if pieces is None:
                binding.bind_cpu_input(name, np.ascontiguousarray(array))
                continue
            if len(pieces) == 1:
                pointer = pieces[0].pointer
            else:
                value = ort.OrtValue.ortvalue_from_shape_and_type(
                    list(array.shape), array.dtype.type, "cuda", device
                )
                joined.append(value)
                pointer = value.data_ptr()
                cuda_ipc.join_on_device(pieces, pointer, device)
            binding.bind_input(name, "cuda", device, array.dtype.type, list(array.shape), pointer)
        plan = self._device_output_plan(batch)
        for name in self.output_names:
            where = plan.get(name)
            if where is None:
                binding.bind_output(name, "cpu")
            elif where is True:
                binding.bind_output(name, "cuda", device)
            else:
                target, output, rows = where
                shape = [rows, *output.model_dims]
                binding.bind_output(name, "cuda", device, output.dtype.type, shape, target.pointer)
        self.session.run_with_iobinding(binding, self.run_options)
        binding.synchronize_outputs()  # in the client's region before it is answered
        outputs = []
        for name, value in zip(self.output_names, binding.get_outputs()):
            where = plan.get(name)
            if where is None:
                outputs.append(value.numpy())
            elif where is True:
                dtype = _NUMPY_OF_CONFIG[_CONFIG_OF_ORT[value.data_type()]]
                outputs.append(
                    cuda_ipc.DeviceArray(value.data_ptr(), dtype, value.shape(), device, value)
                )
            else:
                target, output, rows = where
                outputs.append(target.written(output.dtype, [rows, *output.model_dims]))
        return outputs

    def _device_output_plan(self, batch: Batch) -> dict:
        """Output name -> where it is bound: True (on the device, onnxruntime allocates)
        or (target, _PlacedOutput, rows) for the client's region itself; absent: host."""
        targets = batch.output_targets
        if not targets:
            return {}
        count = len(batch)
        plan = {}
        for name in self.output_names:
            if not all((k, name) in targets for k in range(count)):
                continue
            output = self.fixed_outputs.get(name)
            if count == 1 and output is not None:
                header = batch.headers[0]
                rows = header.inputs[0][2][0] if header.inputs and header.inputs[0][2] else 1
                size = rows * output.spec[3]
                if size <= targets[0, name].size:
                    plan[name] = (targets[0, name], output, rows)
                    continue
            plan[name] = True
        return plan

    def _binding_calls(self):
        """(bind_output(name, numpy type, shape, address), run()) over the session's
        IOBinding. onnxruntime's Python wrappers build a device object and convert
        arguments on every call (about 10 us per bound output, more than running a
        small model), so the pybind objects under them are called directly where this
        onnxruntime has them, and the public API otherwise."""
        binding, session, options = self.binding, self.session, self.run_options
        raw_binding = getattr(binding, "_iobinding", None)
        raw_session = getattr(session, "_sess", None)
        try:
            from onnxruntime.capi import _pybind_state as capi

            device = capi.OrtDevice(capi.OrtDevice.cpu(), capi.OrtDevice.default_memory(), 0)
        except (ImportError, AttributeError):
            raw_binding = None
        if raw_binding is None or raw_session is None:

            def bind_output(name, element_type, shape, address):
                binding.bind_output(name, "cpu", 0, element_type, shape, address)

            return bind_output, lambda: session.run_with_iobinding(binding, options)

        def bind_output(name, element_type, shape, address):
            raw_binding.bind_output(name, device, element_type, shape, address)

        return bind_output, lambda: raw_session.run_with_iobinding(raw_binding, options)

    def _run_in_place(self, batch: Batch, feeds: dict) -> list | None:
        """Runs the batch with its outputs bound over their runs in the response block
        that `batch.reserve` lays out, and sets `batch.placed`; the results are views of
        the block. None (nothing reserved, or the block discarded) when that cannot be
        done here: the requests ask for different outputs, an output asked for is BYTES
        or has variable dims, the rows do not add up, the arena has no room, or
        onnxruntime fails (the caller then runs the usual way,
        which reports the error with ORT's status code)."""
        headers = batch.headers
        wanted = headers[0].requested_outputs
        rows = []
        for header in headers:
            if header.requested_outputs != wanted:
                return None
            shape = header.inputs[0][2] if header.inputs else ()
            rows.append(shape[0] if shape else 1)
        total = sum(rows)
        if any(array.shape[:1] != (total,) for array in feeds.values()):
            return None
        placed = self.placed_outputs
        names = [name for name in self.output_names if not wanted or name in wanted]
        if not names or any(name not in placed for name in names):
            return None  # a BYTES output, or one whose dims vary: the usual way
        chosen = [placed[name] for name in names]
        block = batch.reserve([o.spec for o in chosen], rows)
        if block is None:
            return None
        arena = block.arena
        arrays = [
            np.ndarray((total, *o.wire_dims), o.dtype, arena, run)
            for o, run in zip(chosen, block.runs)
        ]
        binding = self.binding
        bind_output = self._bind_output
        try:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            for name, array in feeds.items():
                binding.bind_cpu_input(name, array)  # over the arena, not copied
            for output, array in zip(chosen, arrays):
                address = array.__array_interface__["data"][0]
                bind_output(output.name, output.dtype.type, [total, *output.model_dims], address)
            self._run_binding()
        except Exception:
            block.discard()
            return None
        batch.placed = block
        results = []
        row = 0
        for count in rows:
            end = row + count
            results.append(Response([(o.name, array[row:end]) for o, array in zip(chosen, arrays)]))
            row = end
        return results

    def _split(self, batch: Batch, outputs: list) -> list:
        """Each request's part of the batch's outputs (views, no copy), only the outputs
        it asked for: its rows, or for a batch output its source input's shape."""
        names = self.output_names
        if self.output_reshapes:
            outputs = [self._reshaped(name, array) for name, array in zip(names, outputs)]
        named = list(zip(names, outputs))
        headers = batch.headers
        scatter = self.batch_io.scatter_sources
        if not scatter and (len(headers) == 1 or self.max_batch_size == 0):
            wanted = headers[0].requested_outputs
            return [Response([item for item in named if not wanted or item[0] in wanted])]
        pieces = []
        for name, array in named:
            if name in scatter:
                try:
                    pieces.append(self.batch_io.scatter(name, array, headers))
                except ValueError as exc:
                    return [RequestError(f"model '{self.name}': {exc}", INTERNAL)] * len(headers)
            else:
                pieces.append(_by_rows(array, headers, self.max_batch_size > 0))
        results = []
        for k, header in enumerate(headers):
            wanted = header.requested_outputs
            results.append(
                Response(
                    [
                        (name, parts[k])
                        for name, parts in zip(names, pieces)
                        if not wanted or name in wanted
                    ]
                )
            )
        return results

    def _reshaped(self, name: str, array: np.ndarray) -> np.ndarray:
        dims = self.output_reshapes.get(name)
        if dims is None:
            return array
        lead = [array.shape[0]] if self.max_batch_size > 0 else []
        return array.reshape([*lead, *dims])

    def finalize(self) -> None:
        self.binding = None
        self.session = None


# ---- auto-complete ----------------------------------------------------------------------


def _by_rows(array: np.ndarray, headers: list, batching: bool) -> list:
    """Each request's rows of a batch-major output (the whole of it for a model that does
    not batch)."""
    if not batching or len(headers) == 1:
        return [array] * len(headers)
    pieces = []
    row = 0
    for header in headers:
        shape = header.inputs[0][2] if header.inputs else ()
        end = row + (shape[0] if shape else 1)
        pieces.append(array[row:end])
        row = end
    return pieces


def auto_complete_config(config: dict, model_dir: Path) -> dict:
    """Complete an ONNX model's config from its file as Triton's onnxruntime backend does:
    nothing when inputs and outputs are both given; else max_batch_size (the default 4 when
    every input and output has a variable first dimension and the config sets none,
    dynamic batching then too), and the inputs / outputs that are missing, with data types
    and dims (the batch dimension left out when max_batch_size > 0; a scalar as dims [1],
    with an empty reshape when batching). OnnxModelError when the model cannot batch but
    the config sets max_batch_size."""
    inputs = list(config.get("input", [])) + list(config.get("batch_input", []))
    outputs = list(config.get("output", []))
    if inputs and outputs:
        return config
    version = _auto_complete_version(config, model_dir)
    if version is None:
        return config  # no version folder: the load fails later with Triton's message
    path = model_path(config, model_dir, version)
    if not path.exists():
        raise OnnxModelError(
            f"unable to find '{path}' for model instance '{config.get('name', '')}'"
        )
    # Only the inputs and outputs are read: a CPU session without graph optimizations
    # (custom op libraries of model_operations still registered).
    light = {
        **config,
        "optimization": {"graph": {"level": 2}},
        "parameters": {"intra_op_thread_count": {"string_value": "1"}},
    }
    session = create_session(path, light, "CPU", 0)
    _check_served_types(session, config.get("name", ""), path)
    in_infos = _io_infos(session.get_inputs())
    out_infos = _io_infos(session.get_outputs())
    can_batch = all(
        shape and shape[0] == -1 for _, shape in [*in_infos.values(), *out_infos.values()]
    )
    max_batch_size = int(config.get("max_batch_size", 0) or 0)
    if can_batch:
        if max_batch_size == 0:
            max_batch_size = max(_default_max_batch_size(), 0)
            config["max_batch_size"] = max_batch_size
        if (
            max_batch_size > 1
            and "sequence_batching" not in config
            and "dynamic_batching" not in config
        ):
            config["dynamic_batching"] = {}
    elif max_batch_size != 0:
        raise OnnxModelError(
            f"autofill failed for model '{config.get('name', '')}': model does not support "
            f"batching while non-zero max_batch_size is specified (model file {path})"
        )
    if not inputs:  # as Triton: batch inputs count as inputs given
        config["input"] = _complete_ios(in_infos, max_batch_size)
    if not outputs:
        config["output"] = _complete_ios(out_infos, max_batch_size)
    return config


def _default_max_batch_size() -> int:
    """Triton's `--backend-config=onnxruntime,default-max-batch-size=N` (default 4)."""
    from naiad.repository.autocomplete import backend_setting

    value = backend_setting("onnxruntime", "default-max-batch-size")
    if value is None:
        return DEFAULT_MAX_BATCH_SIZE
    try:
        return int(value)
    except ValueError:
        raise OnnxModelError(
            f"failed to convert 'default-max-batch-size' value '{value}' to an integer"
        ) from None


def _complete_ios(infos: dict, max_batch_size: int) -> list:
    ios = []
    for name, (datatype, shape) in infos.items():
        dims = shape[1:] if max_batch_size > 0 else list(shape)
        io = {"name": name, "data_type": datatype}
        if not dims:
            dims = [1]
            if max_batch_size > 0:
                io["reshape"] = {"shape": []}
        io["dims"] = dims
        ios.append(io)
    return ios


def _auto_complete_version(config: dict, model_dir: Path) -> str | None:
    """The version folder auto-complete reads the model from: the latest one (Triton
    reads the version it loads; every version shares one config)."""
    versions = (
        sorted(
            int(child.name)
            for child in Path(model_dir).iterdir()
            if child.is_dir() and child.name.isdigit()
        )
        if Path(model_dir).is_dir()
        else []
    )
    if not versions:
        return None
    return str(versions[-1])
