"""`naiad check REPOSITORY...`: what a repository would do when served, without serving it.

For a CI pipeline that validates a model repository before it is deployed. Nothing is
loaded and no model code runs: each model's config is read, checked by its repository
agents (the checksum agent reads the files it lists), completed with Triton's defaults and
validated as a load would (repository/config.py, repository/field_support.py), and its
versions are chosen by its version policy. What a load would learn only by running things
is not checked: a backend's auto-complete (it reads model files, or runs a Python model's
auto_complete_config) and the model's own initialize.

Per model, one of:
  LOAD     it would load (its versions), perhaps with warnings: fields ignored as hints
  REFUSED  it would not load, and why
Exit status 0 when every model would load, 1 otherwise (or when a repository cannot be read).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from naiad.backends import python_based
from naiad.protos import model_config_pb2
from naiad.repository import field_support
from naiad.repository.autocomplete import load_completed_config
from naiad.repository.catalog import Catalog
from naiad.repository.config import (
    ConfigError,
    set_config_name,
)
from naiad.repository.repository import available_versions, select_versions

LOAD = "LOAD"
REFUSED = "REFUSED"


@dataclasses.dataclass
class Verdict:
    """What serving the repository would do with one model."""

    name: str
    status: str
    versions: list[int] = dataclasses.field(default_factory=list)
    reason: str = ""
    warnings: list[str] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def run(options) -> int:
    missing = [str(r) for r in options.repositories if not Path(r).is_dir()]
    if missing:
        print(f"error: not a model repository folder: {', '.join(missing)}", file=sys.stderr)
        return 1
    set_config_name(options.model_config_name)
    python_based.set_backend_directory(options.backend_directory)
    auto_complete = not (options.strict_model_config or options.disable_auto_complete_config)
    verdicts = check_repositories(options.repositories, auto_complete)
    if options.json:
        print(json.dumps([v.as_json() for v in verdicts], indent=2))
    else:
        print(render(verdicts))
    return 0 if all(v.status == LOAD for v in verdicts) else 1


def check_repositories(repositories: list[Path], auto_complete: bool = True) -> list[Verdict]:
    """A verdict per model folder of `repositories` (served as one namespace), by name."""
    folders, duplicates = Catalog(list(repositories)).scan()
    verdicts = {name: Verdict(name, REFUSED, reason=reason) for name, reason in duplicates.items()}
    configs = {}
    for name, folder in folders.items():
        verdicts[name], configs[name] = check_model(folder, auto_complete)
    for name, config in configs.items():
        if config is not None and verdicts[name].status == LOAD:
            missing = _missing_steps(config, set(folders))
            if missing:
                verdicts[name].status = REFUSED
                verdicts[name].reason = missing
    return [verdicts[name] for name in sorted(verdicts)]


def check_model(folder: Path, auto_complete: bool = True):
    """(Verdict, config or None) for one model folder."""
    name = folder.name
    try:
        config = _config(folder, auto_complete)
    except ConfigError as exc:
        return Verdict(name, REFUSED, reason=exc.message), None
    warnings: list[str] = []
    versions = select_versions(config, available_versions(folder), warnings)
    warnings.extend(field_support.warnings(config))
    if not versions:
        # Triton's wording, as the server's (repository/repository.py).
        reason = (
            f"at least one version must be available under the version policy of model '{name}'"
        )
        return Verdict(name, REFUSED, reason=reason, warnings=warnings), config
    backend = _backend_refusal(config)
    if backend:
        return Verdict(name, REFUSED, versions, backend, warnings), config
    return Verdict(name, LOAD, versions, warnings=warnings), config


def _config(folder: Path, auto_complete: bool) -> model_config_pb2.ModelConfig:
    """The config as the server would serve it, up to (not including) the backend's own
    auto-complete, which reads model files or runs model code."""
    return load_completed_config(
        folder, folder.name, auto_complete=auto_complete, run_backend_hook=False
    )


def _backend_refusal(config: model_config_pb2.ModelConfig) -> str | None:
    from naiad.backends import is_known, unknown_backend_message

    backend = config.backend or config.platform
    # Naiad's own backends, and Python-based ones in --backend-directory.
    if config.platform == "ensemble" or is_known(backend):
        return None
    if not backend:
        return f"model '{config.name}' names no backend or platform, and none can be told from its files"
    # The worker's words when it meets such a model (naiad.backends.load_backend).
    return unknown_backend_message(backend, config.name)


def _missing_steps(config: model_config_pb2.ModelConfig, names: set[str]) -> str | None:
    for step in config.ensemble_scheduling.step:
        if step.model_name not in names:
            return (
                f"ensemble '{config.name}' has a step on model '{step.model_name}', "
                "which is not in the repositories"
            )
    return None


def render(verdicts: list[Verdict]) -> str:
    """The report a person reads: a line per model, its warnings indented below."""
    if not verdicts:
        return "no models"
    width = max(len(v.name) for v in verdicts)
    lines = []
    for verdict in verdicts:
        if verdict.status == LOAD:
            detail = "versions " + ", ".join(map(str, verdict.versions))
        else:
            detail = verdict.reason
        lines.append(f"{verdict.name:<{width}}  {verdict.status:<7}  {detail}")
        lines.extend(f"{'':<{width}}  warning  {w}" for w in verdict.warnings)
    loads = sum(v.status == LOAD for v in verdicts)
    lines.append(f"{loads} of {len(verdicts)} models would load")
    return "\n".join(lines)
