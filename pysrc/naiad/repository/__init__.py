"""The model repository: config.pbtxt parsing, version selection, metadata JSON."""

from naiad.repository.config import ConfigError, config_to_json, load_model_config
from naiad.repository.metadata import SUPPORTED_EXTENSIONS, model_metadata, server_metadata
from naiad.repository.repository import ModelEntry, scan_model, scan_repository

__all__ = [
    "SUPPORTED_EXTENSIONS",
    "ConfigError",
    "ModelEntry",
    "config_to_json",
    "load_model_config",
    "model_metadata",
    "scan_model",
    "scan_repository",
    "server_metadata",
]
