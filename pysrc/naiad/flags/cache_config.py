"""The response cache's server flags, read as tritonserver reads them.

`--cache-config <cache>,<setting>=<value>` (repeatable) and the deprecated
`--response-cache-byte-size N` (the local cache of N bytes) turn the cache on;
`--cache-directory` is accepted and not used: both caches are built into the C++ core
(csrc/core/response_cache.h, redis_cache.h), no library is loaded. The `local` cache
takes `size`; the `redis` cache takes the settings of Triton's redis_cache (host, port,
user, password, db, connect_timeout, socket_timeout, pool_size, wait_timeout, and for TLS
tls_enabled, cert, key, cacert, cacert_dir, sni); as Triton's, the user and password
may also come from TRITONCACHE_REDIS_USERNAME and TRITONCACHE_REDIS_PASSWORD, which the
settings override. A model uses the cache with
`response_cache { enable: true }` in its config.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CacheConfigError",
    "LocalCacheSettings",
    "RedisCacheSettings",
    "cache_settings",
    "model_cache_refusal",
]

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class LocalCacheSettings:
    size: int  # bytes

    def enable(self, lane) -> None:
        lane.enable_cache(self.size)


@dataclass(frozen=True)
class RedisCacheSettings:
    host: str
    port: int
    user: str = ""
    password: str = ""
    db: int = 0
    # Milliseconds. Triton's 0 (wait forever) is not taken: the cache is asked on the
    # server's event loop, which must not wait on Redis for long.
    connect_timeout: int = 100
    socket_timeout: int = 100
    # TLS (tls_enabled=true): the files and server name of _REDIS_TLS_FILES, those given.
    tls: dict[str, str] | None = field(default=None, hash=False)

    def enable(self, lane) -> None:
        try:
            lane.enable_redis_cache(
                self.host,
                self.port,
                self.user,
                self.password,
                self.db,
                self.connect_timeout,
                self.socket_timeout,
                self.tls,
            )
        except (ConnectionError, ValueError) as exc:
            raise CacheConfigError(f"Failed to initialize RedisCache: {exc}") from None


# Triton's redis_cache settings taken as they are, read as numbers, and refused.
_REDIS_NUMBERS = ("port", "db", "connect_timeout", "socket_timeout", "pool_size", "wait_timeout")
_REDIS_TEXT = ("host", "user", "password")
# Read, as by Triton's redis_cache, only where tls_enabled is given.
_REDIS_TLS_FILES = ("cert", "key", "cacert", "cacert_dir", "sni")
# Triton's redis cache reads these first; `user=` and `password=` override them.
_REDIS_CREDENTIAL_ENV = {
    "user": "TRITONCACHE_REDIS_USERNAME",
    "password": "TRITONCACHE_REDIS_PASSWORD",
}


def _redis_tls(settings: dict[str, str]) -> dict[str, str] | None:
    """The TLS settings: TLS is on when tls_enabled is "true" (Triton's test, exactly);
    cert and key come together."""
    given = {name: settings[name] for name in _REDIS_TLS_FILES if name in settings}
    if "tls_enabled" not in settings:
        if given:
            log.warning(
                "--cache-config redis: %s given without tls_enabled=true: Redis is reached "
                "without TLS (as by Triton)",
                ", ".join(sorted(given)),
            )
        return None
    if settings["tls_enabled"] != "true":
        return None
    if ("cert" in given) != ("key" in given):
        raise CacheConfigError(
            "Failed to initialize RedisCache: TLS 'cert' and 'key' are given together "
            f"(got only '{'cert' if 'cert' in given else 'key'}')"
        )
    return given


def _redis_settings(settings: dict[str, str], environ: Mapping[str, str]) -> RedisCacheSettings:
    if "host" not in settings or "port" not in settings:
        raise CacheConfigError(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum "
            "specify 'host' and 'port' in the configuration - e.g. tritonserver "
            "--cache-config redis,host=redis --cache-config redis,port=6379 "
            "--model-repository=/models ..."
        )
    unknown = sorted(
        set(settings) - set(_REDIS_NUMBERS) - set(_REDIS_TEXT) - {"tls_enabled", *_REDIS_TLS_FILES}
    )
    if unknown:
        raise CacheConfigError(
            f"Failed to initialize RedisCache: unknown setting(s) {', '.join(unknown)}"
        )
    numbers = {}
    for name in _REDIS_NUMBERS:
        if name in settings:
            try:
                numbers[name] = int(settings[name])
            except ValueError:
                raise CacheConfigError(
                    f"Failed to initialize RedisCache: '{name}' must be a number, "
                    f"got '{settings[name]}'"
                ) from None
            if numbers[name] < 0:
                raise CacheConfigError(
                    f"Failed to initialize RedisCache: '{name}' {numbers[name]} is negative"
                )
    # One connection serves the event loop: pool_size and wait_timeout have nothing to size.
    numbers.pop("pool_size", None)
    numbers.pop("wait_timeout", None)
    for name in ("connect_timeout", "socket_timeout"):
        if numbers.get(name) == 0:
            del numbers[name]
    return RedisCacheSettings(
        host=settings["host"],
        user=settings.get("user", environ.get(_REDIS_CREDENTIAL_ENV["user"], "")),
        password=settings.get("password", environ.get(_REDIS_CREDENTIAL_ENV["password"], "")),
        tls=_redis_tls(settings),
        **numbers,
    )


def cache_settings(
    cache_configs: list[str], byte_size: int | None, environ: Mapping[str, str] = os.environ
) -> LocalCacheSettings | RedisCacheSettings | None:
    """The cache the flags ask for, or None when no cache flag is given; `environ` holds
    the Redis credentials' variables."""
    if byte_size is not None and cache_configs:
        raise CacheConfigError(
            "Error: Incompatible flags --response-cache-byte-size and --cache-config both "
            "provided. Please provide one or the other."
        )
    if byte_size is not None:
        return LocalCacheSettings(max(byte_size, 0))
    if not cache_configs:
        return None
    settings: dict[str, dict[str, str]] = {}
    for arg in cache_configs:
        name, setting, value = _setting(arg)
        settings.setdefault(name, {})[setting] = value
    for name in settings:
        if name not in ("local", "redis"):
            raise CacheConfigError(
                f"unable to find 'libtritoncache_{name}.so' for cache: Naiad has the "
                "'local' and 'redis' caches"
            )
    if len(settings) > 1:
        raise CacheConfigError(
            "Failed to initialize the response cache: one cache at a time, got "
            f"{' and '.join(sorted(settings))}"
        )
    if "redis" in settings:
        return _redis_settings(settings["redis"], environ)
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
    return LocalCacheSettings(value)


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
