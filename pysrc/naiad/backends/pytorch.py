"""PyTorch backend: TorchScript models (`backend: "pytorch"` / `platform: "pytorch_libtorch"`).

One instance loads `<version>/<default_model_filename or model.pt>` with `torch.jit.load`
onto its device (the CPU, or `cuda:<device id>` for a KIND_GPU instance; KIND_MODEL leaves
placement to the model) and runs `forward` under `torch.inference_mode` (the config's
`INFERENCE_MODE` parameter turns it off).

Inputs and outputs follow the rules of Triton's pytorch backend:

- inputs, in this order of preference: every config input name is an argument of
  `forward()` (bound by name); else every name is `<name>__<index>` (bound by index);
  else the config's order. A `forward(self, inputs: Dict[str, Tensor])` gets a dict by
  config name. The number of `forward()` arguments must equal the config's inputs.
- outputs: every name `<name>__<index>` (index into the returned tuple); else the
  config's order. `forward()` returns a Tensor, a List[str], or a tuple of them.
- datatypes: BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 as tensors, and
  TYPE_STRING as a List[str] of one dimension. An output whose dtype disagrees with the
  config fails the request with Triton's message.

Inputs reach the model without a copy: each is `torch.from_numpy` over the batch-major
[N, ...] array in the shared arena (for a KIND_GPU instance, one host->device copy from the
pinned arena on the instance's own CUDA stream). Outputs are viewed per request as numpy
slices of the (CPU) output tensor.

Triton's pytorch backend does not auto-complete configs (TorchScript keeps no input or
output types), and neither does `auto_complete_config` here: it only says so, as Triton's
backend logs.

Torch is optional (`pip install 'naiad[torch]'`); without it a torch model fails to load
with a message saying so, and the rest of the server is unaffected.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from naiad.backends import sequence_io
from naiad.backends.base import Backend, Batch, RequestError, Response
from naiad.backends.batch_io import BatchIO
from naiad.backends.tensors import batch_major
from naiad.memory import gpu
from naiad.triton_codes import INTERNAL, INVALID_ARG

log = logging.getLogger("naiad")

INSTALL_HINT = "pip install 'naiad[torch]'"
DEFAULT_MODEL_FILENAME = "model.pt"

# config data_type -> torch dtype name (Triton's ModelConfigDataTypeToTorchType).
TORCH_DTYPES = {
    "TYPE_BOOL": "bool",
    "TYPE_UINT8": "uint8",
    "TYPE_INT8": "int8",
    "TYPE_INT16": "int16",
    "TYPE_INT32": "int32",
    "TYPE_INT64": "int64",
    "TYPE_FP16": "float16",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}

FORWARD_ARGUMENT = "FORWARD_ARGUMENT"
NAMED_INDEX = "NAMED_INDEX"
STRICT_CONFIG_ORDERING = "STRICT_CONFIG_ORDERING"
_DELIMITER = "__"


def _index_part(name: str) -> str | None:
    """What follows the first `__` of `name`, or None without one."""
    position = name.find(_DELIMITER)
    return None if position == -1 else name[position + len(_DELIMITER) :]


def _is_index(text: str) -> bool:
    # As Triton: every character a digit (an empty index passes and means 0).
    return all("0" <= char <= "9" for char in text)


def naming_convention(names: list[str], forward_arguments: list[str] | None) -> str:
    """How config tensor names bind to the model: Triton's GetNamingConvention.

    `forward_arguments`: forward()'s argument names for inputs, None for outputs."""
    if forward_arguments is not None and all(name in forward_arguments for name in names):
        return FORWARD_ARGUMENT
    for name in names:
        index = _index_part(name)
        if index is None or not _is_index(index):
            return STRICT_CONFIG_ORDERING
    return NAMED_INDEX


def tensor_positions(
    names: list[str], convention: str, forward_arguments: list[str] | None = None
) -> dict[str, int]:
    """Config name -> position among forward()'s arguments (inputs) or in the returned
    tuple (outputs), under `convention`."""
    if convention == FORWARD_ARGUMENT:
        return {name: forward_arguments.index(name) for name in names}
    if convention == NAMED_INDEX:
        return {name: int(_index_part(name) or 0) for name in names}
    return {name: position for position, name in enumerate(names)}


def _parameter(config: dict, key: str) -> str | None:
    value = (config.get("parameters") or {}).get(key)
    if value is None:
        return None
    return value.get("string_value", "") if isinstance(value, dict) else str(value)


def _bool_parameter(config: dict, key: str, default: bool) -> bool:
    text = _parameter(config, key)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "on", "1"):
        return True
    if lowered in ("false", "off", "0"):
        return False
    raise ValueError(f"failed to convert '{text}' to boolean value")


def _int_parameter(config: dict, key: str) -> int | None:
    text = _parameter(config, key)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"failed to convert '{text}' to integral number") from None


def _import_torch(model_name: str):
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(
            f"model '{model_name}' needs PyTorch (backend 'pytorch'), which is not installed "
            f"in this environment ({exc}); install it with: {INSTALL_HINT}"
        ) from None
    return torch


def auto_complete_config(config: dict, model_dir: Path) -> dict:
    """Triton's pytorch backend completes nothing from a TorchScript file (it keeps no
    input/output datatypes or shapes): the config stays as it is, with Triton's warning."""
    log.warning(
        "skipping model configuration auto-complete for '%s': not supported for pytorch backend",
        config.get("name") or Path(model_dir).name,
    )
    return config


class PyTorchBackend(Backend):
    batch_tensors = True  # the worker hands over the batch-major input tensors (Batch.tensors)

    def __init__(self, args: dict):
        config = json.loads(args["model_config"])
        self.name = name = args["model_name"]
        torch = self.torch = _import_torch(name)
        self.config = config
        # torch dtype -> config data_type, for checking outputs.
        self.config_of_dtype = {
            getattr(torch, torch_name): config_type
            for config_type, torch_name in TORCH_DTYPES.items()
        }
        self.max_batch_size = int(config.get("max_batch_size") or 0)
        self.inference_mode = _bool_parameter(config, "INFERENCE_MODE", True)
        self.cache_cleaning = _bool_parameter(config, "ENABLE_CACHE_CLEANING", False)
        optimized = not _bool_parameter(config, "DISABLE_OPTIMIZED_EXECUTION", False)
        torch._C._set_graph_executor_optimize(optimized)
        intra = _int_parameter(config, "INTRA_OP_THREAD_COUNT")
        if intra and intra > 0:
            torch.set_num_threads(intra)
        inter = _int_parameter(config, "INTER_OP_THREAD_COUNT")
        if inter and inter > 0:
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError:  # already set, or parallel work already started
                pass
        if _bool_parameter(config, "DISABLE_CUDNN", False):
            torch.backends.cudnn.enabled = False

        self.kind = kind = args.get("model_instance_kind", "CPU")
        self.device_id = device_id = int(args.get("model_instance_device_id") or 0)
        self.stream = None
        self.pinned = False
        # On a GPU: CUDA shared-memory inputs on this device come as device arrays read
        # in place (Batch.device_inputs), outputs bound for such regions stay on it.
        self.device_inputs = kind == "GPU"
        if kind == "GPU":
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"instance '{args['model_instance_name']}' of model '{name}' is KIND_GPU "
                    f"(device {device_id}) but this PyTorch ({torch.__version__}) has no CUDA"
                )
            self.device = torch.device("cuda", device_id)
            torch.cuda.set_device(self.device)
            self.stream = torch.cuda.Stream(self.device)
        else:
            self.device = torch.device("cpu")

        self.config_path = Path(args["model_repository"]) / "config.pbtxt"
        filename = config.get("default_model_filename") or DEFAULT_MODEL_FILENAME
        self.path = path = Path(args["model_repository"]) / args["model_version"] / filename
        if not path.is_file():
            raise RuntimeError(f"unable to find '{path}' for model instance '{name}'")
        try:
            with torch.inference_mode(self.inference_mode):
                if kind == "MODEL":
                    self.model = torch.jit.load(str(path))
                else:
                    self.model = torch.jit.load(str(path), map_location=self.device)
        except Exception as exc:
            raise RuntimeError(
                f"failed to load model '{name}': '{path}' is not a TorchScript model "
                f"torch.jit.load can read: {_first_line(exc)}"
            ) from None
        self.model.eval()
        # Ragged inputs, batch inputs and batch outputs (backends/batch_io.py).
        self.batch_io = BatchIO(config)
        self._bind_inputs()
        self._bind_outputs()

    # -- load-time checks (Triton's ValidateInputs / ValidateOutputs) ----------------------

    def _bind_inputs(self) -> None:
        config, name = self.config, self.name
        inputs = config.get("input") or []
        try:
            arguments = list(self.model.forward.schema.arguments)
        except (AttributeError, RuntimeError) as exc:
            raise RuntimeError(f"'{self.path}' of model '{name}' has no forward(): {exc}") from None
        if arguments and arguments[0].type.kind() == "ClassType":
            arguments = arguments[1:]  # self
        self.dict_input = len(arguments) == 1 and arguments[0].type.kind() == "DictType"
        forward_arguments = []
        if not self.dict_input:
            for argument in arguments[1:]:
                if argument.type.kind() == "DictType":
                    raise RuntimeError(
                        "Multiple inputs of kind DictType were detected. Only a single input "
                        f"of type Dict(str, Tensor) is supported (model '{name}', '{self.path}')."
                    )
            for argument in arguments:
                if argument.type.kind() not in ("TensorType", "ListType"):
                    raise RuntimeError(
                        f"An input of type '{argument.type}' was detected in the model. Only a "
                        "single input of type Dict(str, Tensor) or input(s) of type Tensor are "
                        f"supported (model '{name}', '{self.path}')."
                    )
                forward_arguments.append(argument.name)
        # A sequence model's control inputs, each bound by its <name>__<index>, checked
        # before the count as Triton does.
        control_positions = self._control_positions()
        states = sequence_io.states(config)
        batch_inputs = self.batch_io.input_names
        expected = len(inputs) + len(batch_inputs) + len(control_positions) + len(states)
        if not self.dict_input:
            if len(arguments) != expected:
                raise RuntimeError(
                    f"unable to load model '{name}', configuration expects {expected} "
                    f"inputs, model provides {len(arguments)} (forward() of '{self.path}' "
                    f"takes {', '.join(forward_arguments) or 'no arguments'})"
                )
        if not inputs:
            raise RuntimeError(
                "model configuration must contain at least one input, none were specified."
            )
        # Batch inputs bind as inputs do, after the config's inputs (Triton's order).
        names = [tensor["name"] for tensor in inputs] + batch_inputs
        self.input_convention = naming_convention(names, forward_arguments)
        if self.input_convention == STRICT_CONFIG_ORDERING:
            log.warning(
                "inputs of model '%s' are neither all forward() arguments nor all "
                "<name>__<index>: binding them in the configuration's order",
                name,
            )
        self.input_positions = tensor_positions(names, self.input_convention, forward_arguments)
        self.input_positions.update(control_positions)
        self.input_positions.update(self._state_input_positions(states, forward_arguments))
        if not self.dict_input:
            taken: dict[int, str] = {}
            for tensor_name, position in self.input_positions.items():
                if position in taken:
                    raise RuntimeError(
                        f"inputs '{taken[position]}' and '{tensor_name}' of model '{name}' "
                        f"are both forward() argument {position}"
                    )
                taken[position] = tensor_name
                if position >= expected:
                    raise RuntimeError(
                        f"input '{tensor_name}' of model '{name}' is forward() argument "
                        f"{position} by the <name>__<index> convention, but forward() of "
                        f"'{self.path}' takes {expected} inputs"
                    )
        self.input_strings = set()
        for tensor in inputs:
            self._check_datatype(tensor, "input")
            if tensor.get("data_type") == "TYPE_STRING":
                self.input_strings.add(tensor["name"])
        for state in states:
            if state.data_type not in TORCH_DTYPES and state.data_type != "TYPE_STRING":
                raise RuntimeError(
                    f"unsupported datatype {state.data_type} for input state "
                    f"'{state.input_name}' for model '{name}'"
                )

    def _control_positions(self) -> dict[str, int]:
        """Control input name -> forward() argument: Triton's pytorch backend binds a
        sequence control by its `<name>__<index>` whatever the inputs' convention, and
        a CORRID control must have a datatype torch has."""
        positions = {}
        for control in sequence_io.controls(self.config):
            index = _index_part(control.name)
            if index is None or not _is_index(index):
                raise RuntimeError(
                    f"input '{control.name}' does not follow <name>__<index> naming convention."
                )
            if control.kind == sequence_io.CORRID and control.data_type not in TORCH_DTYPES:
                raise RuntimeError(
                    f"input '{control.name}' type '{control.data_type}' is not supported by "
                    "PyTorch."
                )
            positions[control.name] = int(index or 0)
        return positions

    def _state_input_positions(self, states: list, forward_arguments: list) -> dict[str, int]:
        """State input name -> forward() argument, by the convention of the config's
        inputs: a forward() argument of its name, or its `<name>__<index>`. (Under the
        config's order Triton binds state i to argument i, the place of input i: that
        model is refused here, with the reason.)"""
        positions = {}
        if self.dict_input:
            return {state.input_name: 0 for state in states}
        for state in states:
            name = state.input_name
            if self.input_convention == FORWARD_ARGUMENT and name in forward_arguments:
                positions[name] = forward_arguments.index(name)
                continue
            index = _index_part(name)
            if self.input_convention == NAMED_INDEX and index is not None and _is_index(index):
                positions[name] = int(index or 0)
                continue
            raise RuntimeError(
                f"state input '{name}' of model '{self.name}' cannot be bound to a forward() "
                f"argument: the inputs bind by {self.input_convention}, so it must be "
                + (
                    "a forward() argument of that name"
                    if self.input_convention == FORWARD_ARGUMENT
                    else "named <name>__<index>"
                    if self.input_convention == NAMED_INDEX
                    else "bound with the inputs named as forward() arguments or "
                    "<name>__<index>, not by the configuration's order"
                )
            )
        return positions

    def _bind_outputs(self) -> None:
        outputs = self.config.get("output") or []
        if not outputs:
            raise RuntimeError(
                "model configuration must contain at least one output, none were specified."
            )
        names = [tensor["name"] for tensor in outputs]
        self.output_convention = naming_convention(names, None)
        self.output_positions = tensor_positions(names, self.output_convention)
        self.output_dtypes = {}
        for tensor in outputs:
            self._check_datatype(tensor, "output")
            self.output_dtypes[tensor["name"]] = tensor.get("data_type")
        # A state output is bound by its <name>__<index> (Triton enforces that convention
        # for states): what forward() returns there is the sequence's next state.
        for state in sequence_io.states(self.config):
            name = state.output_name
            index = _index_part(name)
            if index is None or not _is_index(index):
                raise RuntimeError(
                    f"output state '{name}' of model '{self.name}' does not follow "
                    "<name>__<index> naming convention."
                )
            if state.data_type not in TORCH_DTYPES and state.data_type != "TYPE_STRING":
                raise RuntimeError(
                    f"unsupported datatype {state.data_type} for state '{name}' for model "
                    f"'{self.name}'"
                )
            self.output_positions[name] = int(index or 0)
            self.output_dtypes[name] = state.data_type
        # Where forward()'s return type says how many outputs it gives, a config that asks
        # for more is refused now rather than on every request (Triton finds out at run time).
        returned = self._returned_count()
        if returned is not None:
            for tensor_name, position in self.output_positions.items():
                if position >= returned:
                    raise RuntimeError(
                        f"output '{tensor_name}' of model '{self.name}' is output {position} of "
                        f"forward(), but forward() of '{self.path}' returns {returned} "
                        f"output{'s' if returned != 1 else ''}"
                    )

    def _returned_count(self) -> int | None:
        try:
            returns = self.model.forward.schema.returns
        except (AttributeError, RuntimeError):
            return None
        if len(returns) != 1:
            return None
        kind = returns[0].type.kind()
        if kind == "TupleType":
            return len(returns[0].type.elements())
        if kind in ("TensorType", "ListType"):
            return 1
        return None

    def _check_datatype(self, tensor: dict, kind: str) -> None:
        datatype = tensor.get("data_type", "TYPE_INVALID")
        if datatype not in TORCH_DTYPES and datatype != "TYPE_STRING":
            raise RuntimeError(
                f"unsupported datatype {datatype} for {kind} '{tensor['name']}' for model "
                f"'{self.name}' ({self.config_path}; the pytorch backend takes "
                "BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 and STRING)"
            )
        if datatype == "TYPE_STRING":
            dims = (tensor.get("reshape") or {}).get("shape") if "reshape" in tensor else None
            if dims is None:
                dims = tensor.get("dims") or []
            if len(dims) + (1 if self.max_batch_size > 0 else 0) > 1:
                raise RuntimeError(
                    f"Triton only supports 1 dimensional List of String as {kind} for "
                    f"'{tensor['name']}' for model '{self.name}'"
                )

    # -- execution ---------------------------------------------------------------------------

    def execute(self, batch: Batch) -> list:
        count = len(batch.headers)
        if count == 0:
            return []
        torch = self.torch
        if self.stream is not None and not self.pinned:
            self.pinned = True  # tried once: the arena is pinned for this process, or not
            gpu.pin_batch_arena(batch, self.device_id)
        try:
            arguments = self._arguments(batch)
        except Exception as exc:
            return [RequestError(f"PyTorch execute failure: {exc}", INTERNAL)] * count
        try:
            with torch.inference_mode(self.inference_mode):
                if self.stream is not None:
                    with torch.cuda.stream(self.stream):
                        returned = self._forward(arguments)
                        if not batch.device_outputs:  # else _responses picks per output
                            returned = _to_host(torch, returned)
                    self.stream.synchronize()
                else:
                    returned = self._forward(arguments)
        except Exception as exc:
            return [RequestError(f"PyTorch execute failure: {exc}", INTERNAL)] * count
        finally:
            if self.cache_cleaning and self.stream is not None:
                torch.cuda.empty_cache()
        return self._responses(batch, returned)

    def _arguments(self, batch: Batch):
        """forward()'s arguments: a tensor (or list of str) per config input, batch-major."""
        torch = self.torch
        header = batch.headers[0]
        arrays = batch_major(batch, self.max_batch_size > 0, self.batch_io.ragged)
        names = header.input_names
        if self.batch_io.inputs:
            computed = self.batch_io.batch_inputs(batch.headers)
            names = [*names, *computed]
            arrays = [*arrays, *computed.values()]
        on_device = self.stream is not None
        values = {}
        for index, (name, array) in enumerate(zip(names, arrays)):
            if batch.device_inputs and any(
                (k, index) in batch.device_inputs for k in range(len(batch.arrays))
            ):
                values[name] = self._device_input(batch, index)
                continue
            if name in self.input_strings or array.dtype == object:
                values[name] = [
                    item.decode("utf-8") if isinstance(item, bytes) else str(item)
                    for item in array.reshape(-1)
                ]
                continue
            tensor = torch.from_numpy(array)
            if on_device:
                with torch.cuda.stream(self.stream):
                    tensor = tensor.to(self.device, non_blocking=True)
            values[name] = tensor
        if self.dict_input:
            return values
        positions = self.input_positions
        ordered = [None] * len(positions)
        for name, value in values.items():
            position = positions.get(name)
            if position is None:
                raise ValueError(f"unexpected input '{name}'")
            ordered[position] = value
        return ordered

    def _device_input(self, batch: Batch, index: int):
        """Input `index` from CUDA shared memory: the client's device memory read in place
        (one request), or its requests' pieces joined on the device (one device-to-device
        copy; a piece on the host goes up first)."""
        torch = self.torch
        pieces = []
        for k, arrays in enumerate(batch.arrays):
            piece = batch.device_inputs.get((k, index))
            if piece is not None:
                pieces.append(torch.as_tensor(piece, device=self.device))
            else:
                with torch.cuda.stream(self.stream):
                    pieces.append(torch.from_numpy(arrays[index]).to(self.device))
        if len(pieces) == 1:
            return pieces[0]
        with torch.cuda.stream(self.stream):
            return torch.cat(pieces) if self.max_batch_size > 0 else pieces[0]

    def _forward(self, arguments):
        if self.dict_input:
            return self.model(arguments)
        return self.model(*arguments)

    def _responses(self, batch: Batch, returned) -> list:
        """Triton's ReadOutputTensors: each config output from its place in what forward()
        returned, checked against the config, split by request along the batch dimension."""
        count = len(batch.headers)
        if isinstance(returned, tuple):
            values = list(returned)
        elif isinstance(returned, (list, self.torch.Tensor)):
            values = [returned]
        else:
            return [
                RequestError(
                    "PyTorch execute failure: output must be of type Tensor, List[str] or Tuple "
                    "containing one of these two types. It should not be a List / Dictionary of "
                    "Tensors or a Scalar",
                    INTERNAL,
                )
            ] * count
        batching = self.max_batch_size > 0
        rows = [
            header.inputs[0][2][0] if batching and header.inputs else 1 for header in batch.headers
        ]
        total = sum(rows)
        outputs = {}
        for name, position in self.output_positions.items():
            if position >= len(values):
                return [
                    RequestError(
                        f"output '{name}' is output {position} of the model, which returned "
                        f"{len(values)} output{'s' if len(values) != 1 else ''}",
                        INVALID_ARG,
                    )
                ] * count
            value = values[position]
            if isinstance(value, list):
                if not all(isinstance(item, str) for item in value):
                    return [
                        RequestError(
                            f"output '{name}' must be of type Tensor or List[str].", INVALID_ARG
                        )
                    ] * count
                array = np.array([item.encode("utf-8") for item in value], dtype=object)
            elif isinstance(value, self.torch.Tensor):
                provided = self.config_of_dtype.get(value.dtype, "TYPE_INVALID")
                expected = self.output_dtypes[name]
                if provided != expected:
                    return [
                        RequestError(
                            f"configuration expects datatype {expected} for output '{name}', "
                            f"model provides {provided}",
                            INVALID_ARG,
                        )
                    ] * count
                if value.dim() == 0:
                    return [
                        RequestError(
                            f"output '{name}' is a scalar which is not supported.", INVALID_ARG
                        )
                    ] * count
                if value.is_cuda and all((k, name) in batch.device_outputs for k in range(count)):
                    # Every request sends it to a CUDA region on this device: it stays
                    # here and goes device to device (worker/shm_outputs.py).
                    array = _OnDevice(value.detach().contiguous())
                else:
                    array = value.detach().cpu().contiguous().numpy()
            else:
                return [
                    RequestError(
                        f"output '{name}' must be of type Tensor or List[str].", INVALID_ARG
                    )
                ] * count
            if name in self.batch_io.scatter_sources:
                try:
                    outputs[name] = self.batch_io.scatter(name, array, batch.headers)
                except ValueError as exc:
                    return [RequestError(f"PyTorch execute failure: {exc}", INTERNAL)] * count
                continue
            if batching and count > 1 and array.shape[0] != total:
                return [
                    RequestError(
                        f"PyTorch execute failure: output '{name}' has {array.shape[0]} rows in "
                        f"its first (batch) dimension, the batch has {total}",
                        INTERNAL,
                    )
                ] * count
            outputs[name] = array
        results = []
        start = 0
        single = count == 1
        scattered = self.batch_io.scatter_sources
        for k, (header, size) in enumerate(zip(batch.headers, rows)):
            wanted = header.requested_outputs
            chosen = []
            for name, array in outputs.items():
                if wanted and name not in wanted:
                    continue
                if name in scattered:  # already cut: the request's piece
                    chosen.append((name, array[k]))
                else:
                    chosen.append((name, array if single else array[start : start + size]))
            if batch.device_outputs:
                chosen = [
                    (name, array.whole() if type(array) is _OnDevice else array)
                    for name, array in chosen
                ]
            results.append(Response(chosen))
            start += size
        return results

    def finalize(self) -> None:
        self.model = None
        if self.stream is not None:
            self.torch.cuda.empty_cache()


class _OnDevice:
    """An output left on the GPU for CUDA shared-memory regions: sliced by rows like an
    array; `whole()` gives the cuda_ipc.DeviceArray the worker copies device to device."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    @property
    def shape(self):
        return tuple(self.tensor.shape)

    def __getitem__(self, rows):
        return _OnDevice(self.tensor[rows].contiguous())

    def whole(self):
        from naiad.memory import cuda_ipc

        dtype = self.tensor.new_empty(0, device="cpu").numpy().dtype
        return cuda_ipc.DeviceArray.of_torch(self.tensor, dtype)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _to_host(torch, returned):
    """Outputs moved to the CPU (inside the instance's stream)."""
    if isinstance(returned, torch.Tensor):
        return returned.to("cpu", non_blocking=False)
    if isinstance(returned, tuple):
        return tuple(_to_host(torch, value) for value in returned)
    return returned
