"""The response cache's server flags, read as tritonserver reads them.

`--cache-config <cache>,<setting>=<value>` (repeatable) and the deprecated
`--response-cache-byte-size N` (the local cache of N bytes) turn the cache on;
`--cache-directory` is accepted and not used: the local cache is built into the C++ core
(csrc/core/response_cache.h), no library is loaded. Only the `local` cache exists here.
A model uses the cache with `response_cache { enable: true }` in its config.
"""

from __future__ import annotations

__all__ = ["cache_size", "CacheConfigError", "model_cache_refusal"]


class CacheConfigError(ValueError):
    """A cache flag tritonserver would refuse, with its words."""


def _setting(arg: str) -> tuple[str, str, str]:
    """(cache, setting, value) of one --cache-config, or Triton's parse error."""
    name, comma, rest = arg.partition(",")
    if not name or not comma:
        raise CacheConfigError(
            "No cache specified. --cache-config option format is "
            f"<cache name>,<setting>=<value>. Got {arg}"
        )
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise CacheConfigError(
            f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {arg}"
        )
    return name, setting, value


def cache_size(cache_configs: list[str], byte_size: int | None) -> int | None:
    """The local cache's capacity in bytes, or None when no cache flag is given."""
    if byte_size is not None and cache_configs:
        raise CacheConfigError(
            "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."
        )
    if byte_size is not None:
        return max(byte_size, 0)
    if not cache_configs:
        return None
    settings: dict[str, dict[str, str]] = {}
    for arg in cache_configs:
        name, setting, value = _setting(arg)
        settings.setdefault(name, {})[setting] = value
    for name in settings:
        if name != "local":
            raise CacheConfigError(
                f"unable to find 'libtritoncache_{name}.so' for cache: Naiad has the "
                "'local' cache only"
            )
    size = settings["local"].get("size")
    if size is None:
        raise CacheConfigError(
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        )
    try:
        value = int(size)
    except ValueError:
        raise CacheConfigError(
            f"Failed to initialize LocalCache: 'size' must be a number of bytes, got '{size}'"
        ) from None
    if value < 0:
        raise CacheConfigError(f"Failed to initialize LocalCache: 'size' {value} is negative")
    return value


def model_cache_refusal(config) -> str | None:
    """Triton's load error for a model config that enables the cache where it cannot
    be used (decoupled models, sequence batching), whether or not the server has a
    cache; None when the config is fine."""
    if not config.response_cache.enable:
        return None
    if config.HasField("sequence_batching"):
        return (
            f"Response Cache does not currently support model {config.name} with sequence "
            "batching scheduler. Please disable the response cache."
        )
    if config.model_transaction_policy.decoupled:
        return (
            f"Response Cache does not currently support model {config.name} with "
            "'decoupled' transaction policy. Please disable the response cache."
        )
    return None
