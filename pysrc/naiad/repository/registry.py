"""Model repositories registered while serving (Triton's RegisterModelRepository).

A registered repository is a folder whose subfolders are models, as a
`--model-repository` folder's are, except that a *mapping* may serve a subfolder under
another name (`{"resnet_v2": "model"}`: the folder `model` is the model `resnet_v2`,
whatever its config's name says). The SageMaker multi-model endpoint registers the
folder each load names (http/sagemaker_models.py); the catalog (catalog.py) reads the
registrations beside its start-up repositories. This is the one place that knows the
folder -> name mappings.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RegistrationError", "RepositoryRegistry"]


class RegistrationError(ValueError):
    """A repository that cannot be registered or unregistered; `conflict`: it, or a name
    it maps, is registered already (Triton's ALREADY_EXISTS)."""

    def __init__(self, message: str, conflict: bool = False):
        super().__init__(message)
        self.conflict = conflict


class RepositoryRegistry:
    def __init__(self, fixed: list[Path]):
        """`fixed`: the start-up repositories, which count as registered."""
        self._fixed = {str(path) for path in fixed}
        # repository path (as Path writes it) -> {model name: subfolder}
        self._mappings: dict[str, dict[str, str]] = {}

    def register(self, repository: str, mapping: dict[str, str]) -> None:
        """Adds the folder `repository`, with `mapping` (model name -> subfolder). Raises
        RegistrationError with Triton's message."""
        if not repository or not Path(repository).is_dir():
            raise RegistrationError(f"failed to register '{repository}', repository not found")
        key = str(Path(repository))
        if key in self._fixed or key in self._mappings:
            raise RegistrationError(
                f"model repository '{repository}' has already been registered", conflict=True
            )
        for name in mapping:
            if self.folder_of(name) is not None:
                raise RegistrationError(
                    f"failed to register '{name}', there is a conflicting mapping for '{name}'",
                    conflict=True,
                )
        self._mappings[key] = dict(mapping)

    def unregister(self, repository: str) -> None:
        if self._mappings.pop(str(Path(repository)), None) is None:
            raise RegistrationError(f"failed to unregister '{repository}', repository not found")

    @property
    def folders(self) -> list[Path]:
        """The registered repositories, in the order they were registered."""
        return [Path(repository) for repository in self._mappings]

    def folder_of(self, name: str) -> Path | None:
        """The folder a mapping serves as model `name`, or None."""
        for repository, mapping in self._mappings.items():
            if name in mapping:
                return Path(repository) / mapping[name]
        return None

    def name_of(self, folder: Path) -> str:
        """The model name the folder `folder` (a repository's subfolder) is served as."""
        mapping = self._mappings.get(str(folder.parent), {})
        for name, subfolder in mapping.items():
            if subfolder == folder.name:
                return name
        return folder.name

    def is_mapped(self, folder: Path) -> bool:
        """Whether a mapping serves `folder` under a name (the folder's own name then
        finds nothing there, as in Triton)."""
        return str(folder.parent) in self._mappings and self.name_of(folder) != folder.name
