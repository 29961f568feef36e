"""config.pbtxt: parse strictly, complete with Triton's defaults, validate, render as JSON.

Triton parses config.pbtxt with protobuf text format against model_config.proto, fills a few
defaults (name, backend/platform, instance groups, version policy, ...) and checks the result.
We do the same so that a repository behaves identically, and reuse Triton's error wording
where we checked it against Triton 2.51, so that messages users search for still match.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor

from naiad.errors import InvalidArgument
from naiad.flags.cache_config import model_cache_refusal
from naiad.protos import model_config_pb2
from naiad.repository import field_support
from naiad.repository.agents import agents_refusal
from naiad.repository.instance_groups import instance_group_error, normalize_instance_groups
from naiad.repository.worker_limits import worker_limits_error

ModelConfig = model_config_pb2.ModelConfig
ModelInstanceGroup = model_config_pb2.ModelInstanceGroup

CONFIG_FILENAME = "config.pbtxt"

# platform -> backend, applied when only the platform is given (Triton does the same).
_BACKEND_OF_PLATFORM = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
}
# backend -> platform, applied when only the backend is given. Python models keep an empty
# platform (metadata then reports the backend name, as Triton does).
_PLATFORM_OF_BACKEND = {
    "onnxruntime": "onnxruntime_onnx",
    "pytorch": "pytorch_libtorch",
    "tensorrt": "tensorrt_plan",
}
_DEFAULT_MODEL_FILENAME = {
    "python": "model.py",
    "onnxruntime": "model.onnx",
    "pytorch": "model.pt",
    "tensorrt": "model.plan",
}


# --model-config-name: Triton's custom configurations, <model>/configs/<name>.pbtxt.
CUSTOM_CONFIG_FOLDER = "configs"
_config_name = ""


def set_config_name(name: str) -> None:
    """--model-config-name for every model loaded from now on ("" : config.pbtxt)."""
    global _config_name
    _config_name = name


def config_path(model_dir: Path) -> Path:
    """The file that holds `model_dir`'s config, as Triton picks it: the custom config
    configs/<--model-config-name>.pbtxt where it exists, else config.pbtxt."""
    model_dir = Path(model_dir)
    if _config_name:
        custom = model_dir / CUSTOM_CONFIG_FOLDER / f"{_config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILENAME


class ConfigError(InvalidArgument):
    """A config.pbtxt that cannot be read, parsed or accepted."""


class VersionConfigError(ConfigError):
    """A config that parses and that the repository accepts, but that Triton refuses when
    it loads a version (its tensors, an instance group it cannot place; and Naiad's own
    refusals, which a Triton user meets as a backend refusing the config). Every version
    of the model fails to load with `reason`; `config` is the completed config, which
    still says which versions those are."""

    def __init__(self, reason: str, config: ModelConfig):
        super().__init__(reason)
        self.reason = reason
        self.config = config


def load_model_config(model_dir: Path, model_name: str, mapped: bool = False) -> ModelConfig:
    """Read, complete and validate `<model_dir>/config.pbtxt` (or the custom config,
    config_path); raise ConfigError if unusable. `mapped`: a registered repository serves
    the folder as `model_name` (registry.py), which then replaces the config's name."""
    path = config_path(model_dir)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        # Triton's wording (strict config mode).
        raise ConfigError(
            f"failed to open text file for read {path}: No such file or directory"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"failed to read {path}: {exc}") from None
    config = parse_model_config(text, path)
    if mapped:
        config.name = model_name
    check_agents(config, model_dir)
    complete_model_config(config, model_name)
    validate_model_config(config)
    return config


def check_agents(config: ModelConfig, model_dir: Path) -> None:
    """Run the repository agents `config` names (the checksum agent) over `model_dir`;
    ConfigError when one refuses. Before anything reads the model's files or runs its
    code (auto-complete), as Triton runs its agents before the load."""
    reason = agents_refusal(config, Path(model_dir))
    if reason is not None:
        raise ConfigError(reason)


def parse_model_config(text: str, path: Path | str = CONFIG_FILENAME) -> ModelConfig:
    """Parse config.pbtxt text strictly (unknown fields are errors); `path` is for messages."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(_describe_parse_error(exc, text, path)) from None
    except ValueError as exc:
        # protobuf's setter, not its parser: a number out of its field's range (an enum
        # field given 2147483648); it says which value, not where.
        raise ConfigError(f"{path}: {exc}") from None
    return config


_UNKNOWN_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
# protobuf echoes the offending line as `'<line>': ` before some messages; we show the
# field name instead, which is what the reader looks for.
_ECHOED_LINE = re.compile(r"^'.*?': ")


def _describe_parse_error(exc: text_format.ParseError, text: str, path: Path | str) -> str:
    line, column = exc.GetLine(), exc.GetColumn()
    detail = re.sub(r"^\d+:\d+ : ", "", str(exc))
    detail = _ECHOED_LINE.sub("", detail)
    where = f"{path}:{line}:{column}" if line is not None else str(path)
    unknown = _UNKNOWN_FIELD.search(detail)
    if unknown:
        return f"{where}: unknown field '{unknown.group(2)}' in {unknown.group(1)}"
    field = _field_at(text, line, column)
    if field:
        return f"{where}: bad value for field '{field}': {detail}"
    return f"{where}: {detail}"


def _field_at(text: str, line: int | None, column: int | None) -> str | None:
    """The name of the field whose value sits at (line, column), if it can be seen there."""
    if line is None or column is None:
        return None
    lines = text.splitlines()
    if not 0 < line <= len(lines):
        return None
    # The last `name:` before the error position on that line.
    names = re.findall(r"(\w+)\s*:", lines[line - 1][: max(column - 1, 0)])
    return names[-1] if names else None


def complete_model_config(config: ModelConfig, model_name: str) -> None:
    """Fill the defaults Triton fills before serving a model (in place)."""
    if not config.name:
        config.name = model_name
    elif config.name != model_name:
        raise ConfigError(
            f"unexpected directory name '{model_name}' for model '{config.name}', "
            "directory name must equal model name"
        )
    if not config.backend and config.platform in _BACKEND_OF_PLATFORM:
        config.backend = _BACKEND_OF_PLATFORM[config.platform]
    if not config.platform and config.backend in _PLATFORM_OF_BACKEND:
        config.platform = _PLATFORM_OF_BACKEND[config.backend]
    if not config.default_model_filename and config.backend in _DEFAULT_MODEL_FILENAME:
        config.default_model_filename = _DEFAULT_MODEL_FILENAME[config.backend]
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    # Triton turns pinned buffers on unless the config says otherwise; its config JSON
    # shows it (an ensemble's shows no optimization).
    for buffer in ("input_pinned_memory", "output_pinned_memory"):
        if config.platform != "ensemble" and not config.optimization.HasField(buffer):
            getattr(config.optimization, buffer).enable = True
    _complete_instance_groups(config)


def _complete_instance_groups(config: ModelConfig) -> None:
    if config.platform == "ensemble":
        return  # an ensemble has no instances of its own in Triton's config
    # Triton's normalization: KIND_AUTO resolved against this host's GPUs, default names,
    # counts and GPU lists (repository/instance_groups.py).
    normalize_instance_groups(config)


def validate_model_config(config: ModelConfig) -> None:
    """Raise what Triton would refuse to load (the checks we rely on): ConfigError for what
    it refuses while polling the repository (the model is not even tried), then
    VersionConfigError for what it refuses as each version loads (version_refusal)."""
    name = config.name
    if config.max_batch_size < 0:
        raise ConfigError(f"'max_batch_size' must be non-negative value for {name}")
    for group in config.instance_group:
        if group.count < 0:
            raise ConfigError(
                f"instance group {group.name} of model {name} must have count >= 1, got {group.count}"
            )
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config)
    cache_refusal = model_cache_refusal(config)  # response_cache where Triton refuses it
    if cache_refusal is not None:
        raise ConfigError(cache_refusal)
    if config.platform == "ensemble":
        from naiad.repository.ensemble import check_structure

        reason = check_structure(config)
        if reason is not None:
            raise ConfigError(reason)
    reason = version_refusal(config)
    if reason is not None:
        raise VersionConfigError(reason, config)


# Triton's words for the status code of a version's load error (Status::AsString),
# which it puts before the reason in the load error, the index and the log.
_INVALID_ARGUMENT = "Invalid argument: "


def version_refusal(config: ModelConfig) -> str | None:
    """Why every version of the model `config` describes fails to load, as Triton words
    it ("Invalid argument: ..."), or None. Triton checks these as it creates a version
    (its inputs and outputs, its instance groups), not while polling; Naiad's own
    refusals (its worker limits, a field it does not act on) are made there too, as a
    backend refusing a config would."""
    reason = _tensors_error("input", config.input, config.name)
    reason = reason or _tensors_error("output", config.output, config.name)
    reason = reason or _batch_io_error(config)
    reason = reason or instance_group_error(config)  # KIND_GPU without that GPU, ...
    reason = reason or worker_limits_error(config)  # Naiad's own parameters
    reason = reason or field_support.refusal(config)  # a field Naiad does not act on
    return None if reason is None else _INVALID_ARGUMENT + reason


def _tensors_error(kind: str, tensors, model_name: str) -> str | None:
    seen = set()
    for tensor in tensors:
        if not tensor.name:
            return f"model {kind} must specify 'name' for {model_name}"
        if tensor.name in seen:
            return f"model {kind} '{tensor.name}' is specified more than once for {model_name}"
        seen.add(tensor.name)
        if tensor.data_type == model_config_pb2.TYPE_INVALID:
            return f"model {kind} '{tensor.name}' must specify 'data_type' for {model_name}"
        if not tensor.dims:
            return f"model {kind} '{tensor.name}' must specify 'dims' for {model_name}"
        if any(dim < 1 and dim != -1 for dim in tensor.dims):
            return (
                f"model {kind} '{tensor.name}' dimension must be integer >= 1, or -1 to "
                f"indicate a variable-size dimension for {model_name}"
            )
        if kind == "input" and tensor.format != tensor.FORMAT_NONE and len(tensor.dims) != 3:
            # Triton 2.51's check and words: an image format names three dimensions.
            return f"model input NHWC/NCHW require 3 dims for {model_name}"
    return None


def _batch_io_error(config: ModelConfig) -> str | None:
    """Triton 2.51's ValidateBatchIO: its checks of batch_input and batch_output, in its
    order and words."""
    inputs = {tensor.name for tensor in config.input}
    outputs = {tensor.name for tensor in config.output}
    kinds = model_config_pb2.BatchInput.Kind
    for entry in config.batch_input:
        if len(entry.source_input) != 1:
            return (
                f"batch input kind '{kinds.Name(entry.kind)}' expects 1 source input, got "
                f"{len(entry.source_input)} for {config.name}"
            )
        if entry.data_type not in (model_config_pb2.TYPE_INT32, model_config_pb2.TYPE_FP32):
            return f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {config.name}"
        for source in entry.source_input:
            if source not in inputs:
                return f"unknown source input name '{source}' for {config.name}"
    for entry in config.batch_output:
        if len(entry.source_input) != 1:
            kind = model_config_pb2.BatchOutput.Kind.Name(entry.kind)
            return (
                f"batch output kind '{kind}' expects 1 source input, got "
                f"{len(entry.source_input)} for {config.name}"
            )
        for source in entry.source_input:
            if source not in inputs:
                return f"unknown source input name '{source}' for {config.name}"
        targets = set()
        for target in entry.target_name:
            if target not in outputs:
                return f"unknown target output name '{target}' for {config.name}"
            if target in targets:
                return f"target output name '{target}' can only be specified once for {config.name}"
            targets.add(target)
    return None


def _validate_dynamic_batching(config: ModelConfig) -> None:
    # Triton accepts dynamic_batching on a model with max_batch_size 0 (requests then run one
    # by one); configs in the wild rely on that, so it is not an error here either.
    batching = config.dynamic_batching
    name = config.name
    if config.max_batch_size > 0:
        for size in batching.preferred_batch_size:
            if size < 1:
                raise ConfigError(f"dynamic batching preferred size must be positive for {name}")
            if size > config.max_batch_size:
                raise ConfigError(
                    f"dynamic batching preferred size must be <= max batch size for {name}"
                )
    levels = batching.priority_levels
    if levels == 0:
        return
    if not 1 <= batching.default_priority_level <= levels:
        raise ConfigError(f"default priority level must be in range [1, {levels}] for {name}")
    for level in batching.priority_queue_policy:
        if not 1 <= level <= levels:
            raise ConfigError(
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )


# ---- JSON, as Triton's GET /v2/models/<model>/config renders it ----

# protobuf renamed including_default_value_fields (< 5.26) to always_print_fields_with_no_presence.
_PRINT_DEFAULTS = (
    "always_print_fields_with_no_presence"
    if "always_print_fields_with_no_presence"
    in inspect.signature(json_format.MessageToDict).parameters
    else "including_default_value_fields"
)
_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def config_to_json(config: ModelConfig) -> dict:
    """The config as Triton's HTTP endpoint returns it.

    Like protobuf's JSON mapping with original field names and fields without presence always
    printed (unset sub-messages omitted), except that 64-bit integers are JSON numbers, not
    strings: Triton rewrites them (dims: [4], max_queue_delay_microseconds: 100). Keys follow
    declaration order, as in Triton's output. Map keys stay strings ("1" for priority levels).
    """
    as_dict = json_format.MessageToDict(
        config, preserving_proto_field_name=True, **{_PRINT_DEFAULTS: True}
    )
    scheduling = as_dict.get("ensemble_scheduling", {})
    if not scheduling.get("max_inflight_requests"):
        scheduling.pop("max_inflight_requests", None)  # a field Triton 2.51's proto lacks
    return _triton_json(as_dict, config.DESCRIPTOR)


def _triton_json(values: dict, descriptor) -> dict:
    return {
        field.name: _convert(values[field.name], field)
        for field in descriptor.fields
        if field.name in values
    }


def _convert(value, field):
    message_type = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        value_field = message_type.fields_by_name["value"]
        return {key: _convert_one(item, value_field) for key, item in value.items()}
    if _is_repeated(field):
        return [_convert_one(item, field) for item in value]
    return _convert_one(value, field)


def _convert_one(value, field):
    if field.message_type is not None:
        return _triton_json(value, field.message_type)
    if field.type in _INT64_TYPES:
        return int(value)
    return value


def _is_repeated(field) -> bool:
    # `label` is deprecated in newer protobuf in favour of `is_repeated`.
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is None:
        return field.label == FieldDescriptor.LABEL_REPEATED
    return is_repeated() if callable(is_repeated) else bool(is_repeated)
