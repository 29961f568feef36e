"""TensorRT backend: serialized engines (`platform: "tensorrt_plan"` / `backend: "tensorrt"`).

An instance (KIND_GPU only, as in Triton) deserializes `<version>/model.plan` (or
`cc_model_filenames[<compute capability>]`, or `default_model_filename`) on its device,
makes one execution context per optimization profile it may use (the group's `profile`
list, else every profile of the engine) and one CUDA stream of its own. A batch binds its
inputs and outputs by name: each input is copied host->device straight from the pinned
arena (`naiad.memory.gpu.pin_arena`), the context runs with `execute_async_v3` on the stream, and
the outputs come back device->host before the responses are written. A batch runs on the
first profile whose shape ranges admit its input shapes.

`auto_complete_config` completes a config from the engine as Triton's tensorrt backend
does (`complete_config`, written over `EngineDescription` so the rules are tested without
a GPU): max_batch_size from the profiles' largest first dimension unless the config's dims
say the engine does not batch, a `dynamic_batching {}` when the batch size is above one
and no scheduler is set, and every input and output's datatype and dims from the engine.

Needs the `gpu` extra (`pip install 'naiad[gpu]'`: tensorrt, cuda-python) and a GPU; without
them a TensorRT model fails to load with a message saying which is missing. Shape tensors
and non-linear I/O formats are refused at load (not supported yet).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from naiad import datatypes
from naiad.backends.base import Backend, Batch, RequestError, Response
from naiad.backends.tensors import batch_major, device_pieces
from naiad.memory import gpu
from naiad.triton_codes import INTERNAL

log = logging.getLogger("naiad")

INSTALL_HINT = "pip install 'naiad[gpu]'"
DEFAULT_MODEL_FILENAME = "model.plan"

# TensorRT DataType name -> config data_type (Triton's ConvertTrtTypeToConfigDataType).
CONFIG_OF_TRT = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "BF16": "TYPE_BF16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}


@dataclass
class TensorDescription:
    """One I/O tensor of an engine, as the completion and validation rules need it."""

    name: str
    is_input: bool
    data_type: str  # config name, TYPE_INVALID for a type Triton has no name for
    shape: tuple  # engine shape, -1 for dynamic dimensions
    is_shape_tensor: bool = False
    linear_format: bool = True
    # Per optimization profile: (min, opt, max) shapes, or for a shape tensor its values.
    profiles: list = field(default_factory=list)


@dataclass
class EngineDescription:
    tensors: list[TensorDescription]
    num_profiles: int = 1

    def inputs(self) -> list[TensorDescription]:
        return [tensor for tensor in self.tensors if tensor.is_input]

    def outputs(self) -> list[TensorDescription]:
        return [tensor for tensor in self.tensors if not tensor.is_input]

    def find(self, name: str) -> TensorDescription | None:
        for tensor in self.tensors:
            if tensor.name == name:
                return tensor
        return None


class CompletionError(RuntimeError):
    pass


def _dims_of(io: dict) -> list:
    reshape = io.get("reshape")
    if reshape is not None and "shape" in reshape:
        return list(reshape.get("shape") or [])
    return list(io.get("dims") or [])


def _profile_indices(config: dict, num_profiles: int, model: str) -> list[int]:
    indices = set()
    for group in config.get("instance_group") or []:
        for profile in group.get("profile") or []:
            try:
                index = int(profile)
            except ValueError:
                raise CompletionError(
                    f"unable to parse '{profile}': invalid stoi argument"
                ) from None
            if not 0 <= index < num_profiles:
                raise CompletionError(
                    f"unable to autofill for '{model}', configuration specified invalid profile "
                    f"{profile} . Number of profiles supported by TensorRT engine: {num_profiles}"
                )
            indices.add(index)
    return sorted(indices) or [0]


def max_supported_batch_size(config: dict, engine: EngineDescription, model: str) -> int:
    """Triton's GetMaxSupportedBatchSize: over the profiles in use, the largest of each
    profile's smallest maximum first dimension among the inputs."""
    best = 0
    for index in _profile_indices(config, engine.num_profiles, model):
        profile_max = None
        for tensor in engine.inputs():
            if index >= len(tensor.profiles):
                continue
            maximum = tensor.profiles[index][2]
            first = maximum[0] if len(maximum) else 0
            profile_max = first if profile_max is None else min(profile_max, first)
        best = max(best, profile_max or 0)
    return best


def _reference_io(engine: EngineDescription, is_input: bool, batching: bool) -> list[dict]:
    """Triton's GetRefIO: the engine's tensors of one direction as config entries."""
    entries = []
    for tensor in engine.tensors:
        if tensor.is_input != is_input:
            continue
        entry = {"name": tensor.name.split(" ")[0], "data_type": tensor.data_type}
        shape = list(tensor.shape)
        if not tensor.is_shape_tensor:
            dims = shape[1:] if batching else shape
            if not dims:
                entry["dims"] = [1]
                entry["reshape"] = {"shape": []}
            else:
                entry["dims"] = dims
        else:
            entry["dims"] = ([shape[0] - 1] if batching else [shape[0]]) if shape else []
        entry["is_shape_tensor"] = tensor.is_shape_tensor
        entry["is_non_linear_format_io"] = not tensor.linear_format
        entries.append(entry)
    return entries


def _fix_io(engine: EngineDescription, reference: list[dict], ios: list[dict]) -> list[dict]:
    """Triton's FixIO: a config with no entries takes the reference ones; otherwise each
    named entry gets the datatype and dims it leaves unset."""
    if not ios:
        return reference
    for io in ios:
        ref = next((entry for entry in reference if entry["name"] == io.get("name")), None)
        if ref is None:
            continue
        if io.get("data_type") in (None, "", "TYPE_INVALID"):
            io["data_type"] = ref["data_type"]
        if not io.get("dims"):
            io["dims"] = list(ref["dims"])
            if "reshape" in ref:
                io["reshape"] = dict(ref["reshape"])
        tensor = engine.find(io["name"])
        is_shape = bool(tensor and tensor.is_shape_tensor)
        if io.get("is_shape_tensor") and not is_shape:
            raise CompletionError(f"'{io['name']}' is incorrectly specified as a shape tensor.")
        io["is_shape_tensor"] = bool(io.get("is_shape_tensor")) or is_shape
        non_linear = bool(tensor and not tensor.linear_format)
        if io.get("is_non_linear_format_io") and not non_linear:
            raise CompletionError(
                f"'{io['name']}' uses a linear IO format, but 'is_non_linear_format_io' is "
                "incorrectly set to true in the model configuration."
            )
        io["is_non_linear_format_io"] = bool(io.get("is_non_linear_format_io")) or non_linear
    return ios


def complete_config(config: dict, engine: EngineDescription) -> dict:
    """Triton's AutoCompleteConfigHelper over an engine description; returns `config`
    completed (in place). CompletionError with Triton's message when it cannot."""
    model = config.get("name", "")
    inputs = config.get("input") or []
    outputs = config.get("output") or []
    config_batch_hint = False
    with_shape = 0
    if inputs or outputs or config.get("batch_input"):
        allowed = {
            "input": sorted(tensor.name for tensor in engine.inputs()),
            "output": sorted(tensor.name for tensor in engine.outputs()),
        }
        for kind, ios in (("input", inputs), ("output", outputs)):
            for io in ios:
                if io.get("allow_ragged_batch"):
                    config_batch_hint = True  # a ragged tensor hints at batching
                    break
                dims = _dims_of(io)
                if dims:
                    with_shape += 1
                name = io.get("name", "")
                if name not in allowed[kind]:
                    raise CompletionError(
                        f"unexpected inference {kind} '{name}', allowed {kind}s are: "
                        + ", ".join(allowed[kind])
                    )
                if dims:
                    tensor = engine.find(name)
                    if tensor.is_shape_tensor:
                        should_batch = bool(tensor.shape) and tensor.shape[0] == dims[0] + 1
                    else:
                        should_batch = len(tensor.shape) == len(dims) + 1
                    if should_batch:
                        config_batch_hint = True
                    if config_batch_hint and not should_batch:
                        raise CompletionError(
                            f"unable to autofill for '{model}', model tensor configurations are "
                            "contradicting each other in terms of whether batching is supported"
                        )
    max_batch_size = max_supported_batch_size(config, engine, model)
    if config_batch_hint and max_batch_size == 0:
        raise CompletionError(
            f"autofill failed for model '{model}': model tensor shape configuration hints for "
            "dynamic batching but the underlying engine doesn't support batching."
        )
    if with_shape and not config_batch_hint:
        log.warning(
            "The specified dimensions in model config for %s hints that batching is unavailable",
            model,
        )
        max_batch_size = 0
    configured = int(config.get("max_batch_size") or 0)
    if configured == 0:
        config["max_batch_size"] = max_batch_size
    elif configured > max_batch_size:
        raise CompletionError(
            f"autofill failed for model '{model}': configuration specified max-batch "
            f"{configured} but TensorRT engine only supports max-batch {max_batch_size}"
        )
    if (
        max_batch_size > 1
        and "sequence_batching" not in config
        and "dynamic_batching" not in config
    ):
        config["dynamic_batching"] = {}
    batching = int(config.get("max_batch_size") or 0) != 0
    config["input"] = _fix_io(engine, _reference_io(engine, True, batching), inputs)
    config["output"] = _fix_io(engine, _reference_io(engine, False, batching), outputs)
    return config


# -- TensorRT and CUDA ---------------------------------------------------------------------


def _import_tensorrt(model_name: str):
    try:
        import tensorrt
    except ImportError as exc:
        raise RuntimeError(
            f"model '{model_name}' needs TensorRT (platform 'tensorrt_plan'), which is not "
            f"installed in this environment ({exc}); install it with: {INSTALL_HINT}"
        ) from None
    return tensorrt


def _cudart(model_name: str):
    cudart = gpu._cudart()
    if cudart is None:
        raise RuntimeError(
            f"model '{model_name}' needs CUDA's Python API (cuda-python), which is not "
            f"installed in this environment; install it with: {INSTALL_HINT}"
        )
    return cudart


def _check(result, what: str):
    """cuda-python returns (error, values...): the values, or RuntimeError."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise RuntimeError(f"{what} failed: {error}")
    return values[0] if len(values) == 1 else values


def plan_path(config: dict, model_dir: Path, version: str, device: int = 0) -> Path:
    """The engine file of a version: cc_model_filenames for the device's compute
    capability, else default_model_filename, else model.plan."""
    filename = config.get("default_model_filename") or DEFAULT_MODEL_FILENAME
    by_capability = config.get("cc_model_filenames") or {}
    for found in gpu.devices():
        if found.index == device and f"{found.major}.{found.minor}" in by_capability:
            filename = by_capability[f"{found.major}.{found.minor}"]
    return Path(model_dir) / str(version) / filename


def describe_engine(trt, engine) -> EngineDescription:
    """An EngineDescription of a deserialized ICudaEngine (TensorRT 10 tensor API)."""
    tensors = []
    num_profiles = engine.num_optimization_profiles
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        is_shape = bool(engine.is_shape_inference_io(name))
        profiles = []
        if is_input:
            for profile in range(num_profiles):
                if is_shape:
                    values = engine.get_tensor_profile_values(profile, name)
                    profiles.append(tuple(tuple(v) for v in values))
                else:
                    shapes = engine.get_tensor_profile_shape(name, profile)
                    profiles.append(tuple(tuple(s) for s in shapes))
        tensors.append(
            TensorDescription(
                name=name,
                is_input=is_input,
                data_type=CONFIG_OF_TRT.get(engine.get_tensor_dtype(name).name, "TYPE_INVALID"),
                shape=tuple(engine.get_tensor_shape(name)),
                is_shape_tensor=is_shape,
                linear_format=engine.get_tensor_format(name) == trt.TensorFormat.LINEAR,
                profiles=profiles,
            )
        )
    return EngineDescription(tensors, num_profiles)


def _load_engine(trt, path: Path):
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    data = path.read_bytes()
    engine = runtime.deserialize_cuda_engine(data)
    return runtime, engine


def auto_complete_config(config: dict, model_dir: Path) -> dict:
    """Complete a TensorRT model's config from its engine (see `complete_config`). Where
    TensorRT or a GPU is missing the config stays as it is: the model then fails to load
    with the reason."""
    try:
        import tensorrt as trt
    except ImportError:
        return config
    if not gpu.device_count():
        return config
    groups = config.get("instance_group") or []
    device = (groups[0].get("gpus") or [0])[0] if groups else 0
    versions = sorted(
        int(child.name) for child in Path(model_dir).iterdir() if child.name.isdigit()
    )
    if not versions:
        return config
    path = plan_path(config, model_dir, str(versions[-1]), device)
    cudart = gpu._cudart()
    if cudart is not None:
        cudart.cudaSetDevice(device)
    try:
        _runtime, engine = _load_engine(trt, path)
    except OSError:
        engine = None
    if engine is None:
        raise CompletionError(f"unable to load plan file to auto complete config: {path}")
    try:
        return complete_config(config, describe_engine(trt, engine))
    finally:
        del engine


class TensorRTBackend(Backend):
    batch_tensors = True  # the worker hands over the batch-major input tensors (Batch.tensors)

    def __init__(self, args: dict):
        config = json.loads(args["model_config"])
        self.name = name = args["model_name"]
        self.instance = args.get("model_instance_name", name)
        trt = self.trt = _import_tensorrt(name)
        cudart = self.cudart = _cudart(name)
        if args.get("model_instance_kind", "CPU") != "GPU":
            hint = "" if gpu.device_count() else " (this host has no CUDA device)"
            raise RuntimeError(
                f"unable to load model '{name}', TensorRT backend supports only GPU device{hint}"
            )
        self.device = self.device_id = device = int(args.get("model_instance_device_id") or 0)
        self.pinned = False
        # CUDA shared-memory inputs on this device come as device arrays and are bound
        # in place (Batch.device_inputs); outputs bound for such regions stay on it or
        # are written straight into the region (Batch.output_targets): `_run`.
        self.device_inputs = True
        if device not in gpu.supported_gpus():
            raise RuntimeError(f"unable to load model '{name}': no CUDA device {device} here")
        _check(cudart.cudaSetDevice(device), f"cudaSetDevice({device})")
        self.stream = _check(
            cudart.cudaStreamCreateWithFlags(cudart.cudaStreamNonBlocking), "cudaStreamCreate"
        )
        self.max_batch_size = int(config.get("max_batch_size") or 0)
        path = plan_path(config, Path(args["model_repository"]), args["model_version"], device)
        if not path.is_file():
            raise RuntimeError(f"unable to find '{path}' for model instance '{self.instance}'")
        self.runtime, self.engine = _load_engine(trt, path)
        if self.engine is None:
            raise RuntimeError(
                f"unable to create TensorRT engine: '{path}' is not a TensorRT engine this "
                f"TensorRT ({trt.__version__}) can deserialize"
            )
        self.description = describe_engine(trt, self.engine)
        self._validate(config, path)
        indices = set()
        for group in config.get("instance_group") or []:
            indices.update(int(profile) for profile in group.get("profile") or [])
        self.profiles = sorted(indices) or list(range(max(self.description.num_profiles, 1)))
        self.contexts = {}
        for profile in self.profiles:
            context = self.engine.create_execution_context()
            if context is None:
                raise RuntimeError("unable to create TensorRT context: out of device memory?")
            if self.description.num_profiles > 1:
                context.set_optimization_profile_async(profile, int(self.stream))
            self.contexts[profile] = context
        _check(cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")
        self.buffers: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)
        self.output_names = [output["name"] for output in config.get("output") or []]
        self.output_dtypes = {
            output["name"]: datatypes.numpy_dtype(datatypes.wire_of_config(output["data_type"]))
            for output in config.get("output") or []
        }

    def _validate(self, config: dict, path: Path) -> None:
        """Triton's checks of the config against the engine's tensors."""
        name = self.name
        engine = self.description
        allowed_inputs = sorted(tensor.name for tensor in engine.inputs())
        allowed_outputs = sorted(tensor.name for tensor in engine.outputs())
        inputs = config.get("input") or []
        if len(allowed_inputs) < len(inputs):
            raise RuntimeError(
                f"unable to load model '{name}', configuration expects {len(inputs)} inputs, "
                f"model provides at most {len(allowed_inputs)} ('{path}')"
            )
        for kind, ios, allowed in (
            ("input", inputs, allowed_inputs),
            ("output", config.get("output") or [], allowed_outputs),
        ):
            for io in ios:
                io_name = io.get("name", "")
                if io_name not in allowed:
                    raise RuntimeError(
                        f"unexpected inference {kind} '{io_name}', allowed {kind}s are: "
                        + ", ".join(allowed)
                        + f" (engine '{path}')"
                    )
                tensor = engine.find(io_name)
                if tensor.is_shape_tensor or io.get("is_shape_tensor"):
                    raise RuntimeError(
                        f"{kind} '{io_name}' of model '{name}' is a shape tensor: Naiad's "
                        "TensorRT backend does not serve shape tensors yet"
                    )
                if not tensor.linear_format:
                    raise RuntimeError(
                        f"{kind} '{io_name}' of model '{name}' uses a non-linear I/O format: "
                        "Naiad's TensorRT backend does not serve those yet"
                    )
                expected = io.get("data_type", "TYPE_INVALID")
                if (
                    tensor.data_type in ("TYPE_INVALID", "TYPE_BF16")
                    or expected != tensor.data_type
                ):
                    raise RuntimeError(
                        f"unexpected datatype {tensor.data_type} for inference {kind} "
                        f"'{io_name}', expecting {expected} for {name} (engine '{path}')"
                    )
                dims = _dims_of(io)
                engine_dims = list(tensor.shape[1:] if self.max_batch_size > 0 else tensor.shape)
                if len(engine_dims) != len(dims) or any(
                    want not in (-1, have) and have != -1 for want, have in zip(dims, engine_dims)
                ):
                    raise RuntimeError(
                        f"model configuration specified invalid shape for {kind} '{io_name}' "
                        f"for model {name}. Error details: the engine ('{path}') has shape "
                        f"{list(tensor.shape)}, the configuration {dims}"
                        + (" after the batch dimension" if self.max_batch_size > 0 else "")
                    )
        if self.max_batch_size > 0:
            supported = max_supported_batch_size(config, engine, name)
            if self.max_batch_size > supported:
                raise RuntimeError(
                    f"unable to load model '{name}': configuration specified max-batch "
                    f"{self.max_batch_size} but TensorRT engine only supports max-batch "
                    f"{supported}"
                )

    # -- execution ---------------------------------------------------------------------------

    def _profile_for(self, shapes: dict) -> int | None:
        for profile in self.profiles:
            if all(
                self._admits(self.description.find(name), profile, shape)
                for name, shape in shapes.items()
            ):
                return profile
        return None

    @staticmethod
    def _admits(tensor, profile: int, shape: tuple) -> bool:
        if tensor is None or profile >= len(tensor.profiles):
            return True
        low, _opt, high = tensor.profiles[profile]
        return len(shape) == len(high) and all(
            lo <= dim <= hi for lo, dim, hi in zip(low, shape, high)
        )

    def _shape_error(self, shapes: dict) -> str:
        profile = self.profiles[0]
        for name, shape in shapes.items():
            tensor = self.description.find(name)
            if tensor is None or profile >= len(tensor.profiles):
                continue
            low, _opt, high = tensor.profiles[profile]
            if len(shape) != len(high):
                detail = (
                    f"model expected {len(high)} dimensions but received {len(shape)} dimensions"
                )
            else:
                bad = next(
                    (i for i, (lo, d, hi) in enumerate(zip(low, shape, high)) if not lo <= d <= hi),
                    None,
                )
                if bad is None:
                    continue
                detail = (
                    f"model expected the shape of dimension {bad} to be between {low[bad]} and "
                    f"{high[bad]} but received {shape[bad]}"
                )
            return (
                f"request specifies invalid shape for input '{name}' for {self.instance}. "
                f"Error details: {detail}"
            )
        return f"no optimization profile of model '{self.name}' admits the input shapes {shapes}"

    def _buffer(self, name: str, nbytes: int) -> int:
        pointer, size = self.buffers.get(name, (0, 0))
        if size >= nbytes and pointer:
            return pointer
        if pointer:
            self.cudart.cudaFree(pointer)
        pointer = int(_check(self.cudart.cudaMalloc(max(nbytes, 1)), "cudaMalloc"))
        self.buffers[name] = (pointer, max(nbytes, 1))
        return pointer

    def execute(self, batch: Batch) -> list:
        count = len(batch.headers)
        if count == 0:
            return []
        if not self.pinned:
            self.pinned = True  # tried once: the arena is pinned for this process, or not
            gpu.pin_batch_arena(batch, self.device)
        header = batch.headers[0]
        arrays = [
            np.ascontiguousarray(array) for array in batch_major(batch, self.max_batch_size > 0)
        ]
        shapes = {name: tuple(array.shape) for name, array in zip(header.input_names, arrays)}
        profile = self._profile_for(shapes)
        if profile is None:
            return [RequestError(self._shape_error(shapes), INTERNAL)] * count
        try:
            outputs = self._run(self.contexts[profile], header.input_names, arrays, batch)
        except Exception as exc:
            return [RequestError(f"TensorRT execute failure: {exc}", INTERNAL)] * count
        batching = self.max_batch_size > 0
        results = []
        start = 0
        for request in batch.headers:
            rows = request.inputs[0][2][0] if batching and request.inputs else 1
            wanted = request.requested_outputs
            chosen = [
                (name, array if count == 1 else array[start : start + rows])
                for name, array in outputs.items()
                if not wanted or name in wanted
            ]
            results.append(Response(chosen))
            start += rows
        return results

    def _run(self, context, names, arrays, batch: Batch | None = None) -> dict:
        """Binds the inputs and outputs by address and runs the context on the stream.
        An input from host memory is copied to the device once; one the client placed in
        CUDA shared memory on this device is bound at the client's pointer (one
        request's) or joined on the device (a batch of several). An output every request
        placed in such a region stays on the device: bound at the client's pointer when
        it is one request's and fits (returned as `target.written`: nothing copied
        after), else in the instance's buffer, returned as a DeviceArray the worker
        copies device to device. Other outputs come back to the host."""
        from naiad.memory import cuda_ipc

        cudart, stream = self.cudart, self.stream
        to_device = cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        to_host = cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for index, (name, array) in enumerate(zip(names, arrays)):
            if not context.set_input_shape(name, array.shape):
                raise RuntimeError(
                    f"trt failed to set binding dimension to {list(array.shape)} for input '{name}'"
                )
            pieces = device_pieces(batch, index, name) if batch is not None else None
            if pieces is not None and len(pieces) == 1:
                context.set_tensor_address(name, pieces[0].pointer)  # in place
                continue
            pointer = self._buffer(name, array.nbytes)
            if pieces is not None:
                cuda_ipc.join_on_device(pieces, pointer, self.device, stream)
            elif array.nbytes:
                _check(
                    cudart.cudaMemcpyAsync(
                        pointer, array.ctypes.data, array.nbytes, to_device, stream
                    ),
                    f"copy of input '{name}' to the device",
                )
            context.set_tensor_address(name, pointer)
        targets = batch.output_targets if batch is not None else {}
        count = len(batch) if batch is not None else 1
        outputs = {}
        for name in self.output_names:
            shape = tuple(context.get_tensor_shape(name))
            if any(dim < 0 for dim in shape):
                raise RuntimeError(f"output '{name}' has a data-dependent shape {list(shape)}")
            dtype = self.output_dtypes[name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            on_device = bool(targets) and all((k, name) in targets for k in range(count))
            if on_device and count == 1 and nbytes <= targets[0, name].size:
                target = targets[0, name]
                context.set_tensor_address(name, target.pointer)  # straight into it
                outputs[name] = (target.written(dtype, shape), None)
                continue
            pointer = self._buffer(name, nbytes)
            context.set_tensor_address(name, pointer)
            if on_device:
                outputs[name] = (cuda_ipc.DeviceArray(pointer, dtype, shape, self.device), None)
            else:
                outputs[name] = (np.empty(shape, dtype), pointer)
        if not context.execute_async_v3(int(stream)):
            raise RuntimeError("execute_async_v3 failed")
        for name, (host, pointer) in outputs.items():
            if pointer is not None and host.nbytes:
                _check(
                    cudart.cudaMemcpyAsync(host.ctypes.data, pointer, host.nbytes, to_host, stream),
                    f"copy of output '{name}' from the device",
                )
        _check(cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
        return {name: array for name, (array, _pointer) in outputs.items()}

    def finalize(self) -> None:
        for pointer, _size in self.buffers.values():
            self.cudart.cudaFree(pointer)
        self.buffers.clear()
        self.contexts.clear()
        self.engine = None
        self.runtime = None
        if self.stream is not None:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream = None
