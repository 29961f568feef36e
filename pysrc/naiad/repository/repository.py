"""Find the models of a repository folder and the versions of each to serve.

A model is a folder holding config.pbtxt and numeric version folders (1/, 2/, ...). Which
versions are served follows the config's version_policy, as in Triton. A model that cannot be
served is still reported, with the reason, so that the repository index can show it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from naiad.protos import model_config_pb2
from naiad.repository import field_support
from naiad.repository.autocomplete import load_completed_config
from naiad.repository.config import ConfigError, VersionConfigError, version_refusal

_VERSION_DIR = re.compile(r"[0-9]+")


@dataclasses.dataclass
class ModelEntry:
    """One model folder: its config and versions to serve, or why it cannot be served."""

    name: str
    path: Path
    config: model_config_pb2.ModelConfig | None
    error: str | None
    versions: list[int]
    # Problems that do not stop the model from loading (Triton logs them), e.g. a version
    # named in a `specific` policy that has no folder.
    warnings: list[str] = dataclasses.field(default_factory=list)
    # The config's fields that Naiad ignores as hints (repository/field_support.py): logged
    # with the warnings above, and shown as the reason of its versions in the index.
    hints: list[str] = dataclasses.field(default_factory=list)
    # Why each of `versions` fails to load, when the config is one Triton refuses as it
    # loads a version (config.version_refusal): the versions are tried and fail with it.
    refusal: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def scan_repository(repo: Path) -> list[ModelEntry]:
    """Every model folder in `repo` (hidden ones skipped), sorted by name."""
    repo = Path(repo)
    folders = [
        child for child in repo.iterdir() if child.is_dir() and not child.name.startswith(".")
    ]
    return [scan_model(folder) for folder in sorted(folders, key=lambda p: p.name)]


def scan_model(
    model_dir: Path, config: model_config_pb2.ModelConfig | None = None, name: str | None = None
) -> ModelEntry:
    """Load one model folder's config (or take `config`, an override already completed
    and checked) and choose its versions; errors go into the entry. `name`: the model's,
    where a registered repository maps the folder to it (default: the folder's name)."""
    model_dir = Path(model_dir)
    name = name or model_dir.name
    if config is None:
        try:
            config = load_completed_config(model_dir, name, mapped=name != model_dir.name)
            refusal = None
        except VersionConfigError as exc:
            config, refusal = exc.config, exc.reason
        except ConfigError as exc:  # refused while polling: no version is tried
            return ModelEntry(name, model_dir, None, exc.message, [])
    else:
        refusal = version_refusal(config)
    warnings: list[str] = []
    versions = select_versions(config, available_versions(model_dir), warnings)
    hints = field_support.warnings(config)
    warnings.extend(hints)
    if not versions:
        # Triton's wording, for both "no version folder" and "none matches the policy".
        error = f"at least one version must be available under the version policy of model '{name}'"
        return ModelEntry(name, model_dir, config, error, [], warnings, hints)
    return ModelEntry(name, model_dir, config, None, versions, warnings, hints, refusal)


def available_versions(model_dir: Path) -> list[int]:
    """Numeric subfolders, ascending. Others are ignored (Triton logs and skips them)."""
    return sorted(
        int(child.name)
        for child in Path(model_dir).iterdir()
        if child.is_dir() and _VERSION_DIR.fullmatch(child.name)
    )


def select_versions(
    config: model_config_pb2.ModelConfig, available: list[int], warnings: list[str] | None = None
) -> list[int]:
    """The versions to serve, ascending, per config.version_policy (default: the latest one).

    Versions a `specific` policy names but that have no folder are skipped and reported in
    `warnings`, as Triton does (it logs them and loads the rest).
    """
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return sorted(available)
    if choice == "specific":
        present = set(available)
        chosen = []
        for version in sorted(set(policy.specific.versions)):
            if version in present:
                chosen.append(version)
            elif warnings is not None:
                warnings.append(
                    f"version {version} is specified for model '{config.name}', "
                    "but the version directory is not present"
                )
        return chosen
    # latest (also the default). num_versions 0 is taken as 1.
    count = max(policy.latest.num_versions, 1)
    return sorted(available)[-count:] if available else []
