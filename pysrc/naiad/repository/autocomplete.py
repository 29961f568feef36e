"""Config auto-complete: what Triton fills in a model's config when `--strict-model-config`
is false (Triton's default) and `--disable-auto-complete-config` is not given.

1. A model folder without `config.pbtxt` starts from an empty config (with auto-complete
   off that is an error, Triton's "failed to open text file for read").
2. The backend fields, from the model's files as Triton's server does it
   (AutoCompleteBackendFields): `backend`, `platform` and `default_model_filename` from
   each other, or from which of `model.plan`, `model.onnx`, `model.pt`, `model.py` the
   first version folder holds.
3. Triton's defaults (`config.complete_model_config`: name, instance groups, ...).
4. The backend's own hook: a backend module (naiad.backends.<module>) may define
   `auto_complete_config(config: dict, model_dir: pathlib.Path) -> dict`, which gets the
   config as Triton's JSON (`config.config_to_json`) and returns it completed (the
   onnxruntime backend reads inputs, outputs and max_batch_size from the model file).
   Python models: the model's `TritonPythonModel.auto_complete_config`, as in Triton's
   Python backend, run in a short child process so the model's imports stay out of the
   server; for a Python-based backend (`<backend-directory>/<name>/model.py`) that file's,
   and the config gets `runtime: "model.py"` as Triton's does.
5. Validation (`config.validate_model_config`) of the completed config.

An error at any step is a ConfigError: the model is UNAVAILABLE with that reason.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

from google.protobuf import json_format

from naiad.repository.config import (
    ConfigError,
    ModelConfig,
    VersionConfigError,
    check_agents,
    complete_model_config,
    config_path,
    config_to_json,
    load_model_config,
    parse_model_config,
    validate_model_config,
)

__all__ = [
    "backend_setting",
    "complete_backend_fields",
    "complete_override",
    "configure",
    "enabled",
    "load_completed_config",
]

# Triton's default: auto-complete on (--strict-model-config=false).
_enabled = True
# Triton's --backend-config settings: backend name ("" for every backend) -> {key: value}.
_backend_config: dict[str, dict[str, str]] = {}


def configure(enabled: bool, backend_config: list[str] | None = None) -> None:
    """Turn auto-complete on or off for the configs loaded from now on (the server sets
    it from --strict-model-config / --disable-auto-complete-config at start), and take
    Triton's `--backend-config` settings (`<backend>,<key>=<value>` or `<key>=<value>`
    for every backend). ValueError for a malformed one."""
    global _enabled
    _enabled = bool(enabled)
    _backend_config.clear()
    for setting in backend_config or []:
        backend, _, pair = setting.rpartition(",")
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--backend-config option format is '<backend name>,<setting>=<value>' or "
                f"'<setting>=<value>', got '{setting}'"
            )
        _backend_config.setdefault(backend, {})[key] = value


def backend_setting(backend: str, key: str, default: str | None = None) -> str | None:
    """A --backend-config value for `backend` (a setting given for every backend too)."""
    value = _backend_config.get(backend, {}).get(key)
    if value is None:
        value = _backend_config.get("", {}).get(key, default)
    return value


def enabled() -> bool:
    return _enabled


def load_completed_config(
    model_dir: Path,
    model_name: str,
    *,
    auto_complete: bool | None = None,
    run_backend_hook: bool = True,
    mapped: bool = False,
) -> ModelConfig:
    """The config of `model_dir` as it is served: read, auto-completed when enabled
    (`auto_complete`, the server's setting by default), completed with Triton's defaults
    and validated. ConfigError when unusable. Without `run_backend_hook` the backend's
    own auto-complete, which reads model files or runs model code, is left out
    (`naiad check`). `mapped`: the folder is served as `model_name`, whatever the
    config's name (a registered repository's mapping, registry.py)."""
    if not (_enabled if auto_complete is None else auto_complete):
        config = load_model_config(model_dir, model_name, mapped)
        _name_python_based_runtime(config)
        return config
    model_dir = Path(model_dir)
    path = config_path(model_dir)
    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"failed to read {path}: {exc}") from None
        config = parse_model_config(text, path)
    else:
        config = ModelConfig()
    if not config.name or mapped:
        config.name = model_name
    check_agents(config, model_dir)
    complete_backend_fields(config, model_dir)
    complete_model_config(config, model_name)
    if run_backend_hook:
        config = _run_backend_hook(config, model_dir)
    validate_model_config(config)
    return config


def complete_override(config: ModelConfig, model_dir: Path) -> ModelConfig:
    """A load request's config override (already completed with Triton's defaults and
    checked, overrides.parse_config_override) auto-completed like a config.pbtxt: the
    backend fields from the files of `model_dir` and the backend's hook. OverrideError
    with the reason when that fails."""
    from naiad.repository.overrides import OverrideError

    try:
        check_agents(config, model_dir)  # the override's agents, over the model's files
    except ConfigError as exc:
        raise OverrideError(exc.message) from None
    if not _enabled:
        _name_python_based_runtime(config)
        return config
    try:
        complete_backend_fields(config, model_dir)
        complete_model_config(config, config.name)
        config = _run_backend_hook(config, model_dir)
        validate_model_config(config)
    except VersionConfigError:
        pass  # each version of the load fails with it (scan_model)
    except ConfigError as exc:
        raise OverrideError(exc.message) from None
    return config


# (backend, platform, default filename) per model file Triton recognises, in its order.
_FILE_BACKENDS = (
    ("model.plan", "tensorrt", "tensorrt_plan", False),
    ("model.onnx", "onnxruntime", "onnxruntime_onnx", True),
    ("model.pt", "pytorch", "pytorch_libtorch", False),
    ("model.py", "python", "", False),
)


def complete_backend_fields(config: ModelConfig, model_dir: Path) -> None:
    """Triton's AutoCompleteBackendFields for the backends Naiad has: backend, platform and
    default_model_filename from one another or from the files of the first version
    folder (in name order, as Triton lists them)."""
    if config.backend or config.platform or config.default_model_filename:
        by_platform = {platform: backend for _, backend, platform, _ in _FILE_BACKENDS if platform}
        by_filename = {filename: backend for filename, backend, _, _ in _FILE_BACKENDS}
        if not config.backend:
            backend = by_platform.get(config.platform) or by_filename.get(
                config.default_model_filename
            )
            if backend:
                config.backend = backend
        return
    versions = sorted(
        child.name for child in Path(model_dir).iterdir() if child.is_dir() and child.name.isdigit()
    )
    if not versions:
        return
    first = Path(model_dir) / versions[0]
    for filename, backend, _platform, directory_ok in _FILE_BACKENDS:
        candidate = first / filename
        if candidate.exists() and (directory_ok or not candidate.is_dir()):
            config.backend = backend
            return


def _hook_module(backend: str) -> str | None:
    from naiad.backends import _REGISTRY

    target = _REGISTRY.get(backend)
    return target.split(":")[0] if target else None


def _name_python_based_runtime(config: ModelConfig) -> str | None:
    """The model.py of the Python-based backend `config` names, or None. Triton's core
    names that file as the runtime of such a model, auto-complete or not (its config
    shows `runtime: "model.py"`); so does this, in place."""
    from naiad.backends import python_based, python_based_model_file

    backend_file = python_based_model_file(config.backend or config.platform)
    if backend_file is not None and not config.runtime:
        config.runtime = python_based.MODEL_FILENAME
    return backend_file


def _run_backend_hook(config: ModelConfig, model_dir: Path) -> ModelConfig:
    backend = config.backend or config.platform
    backend_file = _name_python_based_runtime(config)
    if backend == "python" or backend_file is not None:
        hook = partial(_python_hook, backend_file=backend_file)
    else:
        module_name = _hook_module(backend)
        if module_name is None:
            return config  # an unknown backend: the load says so later
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return config  # its dependency is missing: the worker reports it at load
        hook = getattr(module, "auto_complete_config", None)
        if hook is None:
            return config
    as_json = config_to_json(config)
    try:
        completed = hook(as_json, Path(model_dir))
    except ConfigError:
        raise
    except Exception as exc:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        raise ConfigError(message) from None
    if completed is None:
        completed = as_json
    result = ModelConfig()
    try:
        json_format.ParseDict(completed, result)
    except json_format.ParseError as exc:
        raise ConfigError(
            f"auto-complete of model '{config.name}' gave an invalid config: {exc}"
        ) from None
    # The hook may add tensors or batching; the defaults those need (none today) and
    # the name check run again.
    complete_model_config(result, config.name)
    return result


_PYTHON_HOOK_SCRIPT = """
import json, sys
from naiad.backends.python import auto_complete_config
request = json.loads(sys.stdin.read())
try:
    completed = auto_complete_config(
        request["dir"], request["version"], request["config"], request["backend_file"]
    )
except Exception as exc:
    print(json.dumps({"error": getattr(exc, "message", None) or str(exc)}))
else:
    print(json.dumps({"config": completed}))
"""


def _python_hook(config: dict, model_dir: Path, backend_file: str | None = None) -> dict:
    """A Python model's `TritonPythonModel.auto_complete_config`, run in a child process
    (only when the model file defines one: most do not, and then nothing runs). For a
    Python-based backend, `backend_file` is the file Triton runs it from instead of the
    model's own."""
    versions = sorted(
        (
            int(child.name)
            for child in model_dir.iterdir()
            if child.is_dir() and child.name.isdigit()
        ),
    )
    if not versions:
        return config
    version = str(versions[-1])
    filename = config.get("default_model_filename") or "model.py"
    path = Path(backend_file) if backend_file else model_dir / version / filename
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return config  # the worker reports the missing file with the Python backend's words
    if "auto_complete_config" not in source:
        return config
    request = json.dumps(
        {"dir": str(model_dir), "version": version, "config": config, "backend_file": backend_file}
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PYTHON_HOOK_SCRIPT],
            input=request,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"auto_complete_config of Python model '{config.get('name', '')}' did not return "
            "within 120 s"
        ) from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise ConfigError(
            f"auto_complete_config of Python model '{config.get('name', '')}' failed: "
            f"{done.stderr.strip()[-2000:] or 'no answer'}"
        ) from None
    if "error" in answer:
        raise ConfigError(answer["error"])
    return answer["config"]
