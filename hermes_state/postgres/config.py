"""``database.postgres`` in the profile's config.yaml (spec §2.2), validated into msgspec structs.

Keys are checked in a fixed order (the order of the tables below), so the
first bad key reported is always the same one. Every error is a
:class:`~hermes_state.errors.ConfigError` (a ``ValueError``) naming the key.
The store reads this once, at its first awaited call, and keeps the result
for its lifetime; a failed read is not kept, so a fixed file works on the
next call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from ..config import load_raw_config
from ..errors import ConfigError

__all__ = ["ConnectArgs", "PostgresConfig", "load_postgres_config", "parse_postgres_config"]

_PREFIX = "database.postgres"
READ_ONLY_SETTING = "default_transaction_read_only"


class ConnectArgs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Keyword arguments for ``asyncpg.connect``, named as asyncpg names them (None = asyncpg's default)."""

    timeout: float | None = None
    command_timeout: float | None = None
    statement_cache_size: int | None = None
    max_cached_statement_lifetime: float | None = None
    max_cacheable_statement_size: int | None = None
    server_settings: dict[str, str] | None = None


class PostgresConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Pool options with SQLAlchemy's meanings, plus the asyncpg connect arguments."""

    pool_size: int = 5
    max_overflow: int = 10
    pool_timeout: float = 30.0
    pool_recycle: float = -1.0
    pool_pre_ping: bool = True
    pool_use_lifo: bool = False
    connect_args: ConnectArgs = msgspec.field(default_factory=ConnectArgs)

    def connect_kwargs(self, *, read_only: bool) -> dict[str, Any]:
        """The keyword arguments every new connection gets; read-only forces the server setting."""
        kwargs = {k: v for k, v in msgspec.structs.asdict(self.connect_args).items() if v is not None}
        settings = dict(kwargs.pop("server_settings", None) or {})
        if read_only:
            settings[READ_ONLY_SETTING] = "on"
        if settings:
            kwargs["server_settings"] = settings
        return kwargs


def _number(raw: dict[str, Any], key: str, path: str, *, integer: bool, minimum: float, strict_min: bool = False) -> Any:
    value = raw[key]
    name = f"{path}.{key}"
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and isinstance(value, float)):
        raise ConfigError(f"{name} must be {kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be finite")
    if (value <= minimum) if strict_min else (value < minimum):
        raise ConfigError(f"{name} must be {'>' if strict_min else '>='} {minimum:g}")
    return value


def _boolean(raw: dict[str, Any], key: str) -> bool:
    value = raw[key]
    if not isinstance(value, bool):
        raise ConfigError(f"{_PREFIX}.{key} must be a boolean")
    return value


def _unknown(raw: dict[str, Any], allowed: tuple[str, ...], path: str) -> None:
    extra = sorted(str(k) for k in raw if k not in allowed)
    if extra:
        raise ConfigError(f"{path} contains unsupported key(s): {', '.join(extra)}")


# (key, integer?, minimum) in checking order.
_POOL_NUMBERS = (("pool_size", True, 0), ("max_overflow", True, -1), ("pool_timeout", False, 0), ("pool_recycle", False, -1))
_POOL_FLAGS = ("pool_pre_ping", "pool_use_lifo")
_CONNECT_NUMBERS = (
    ("timeout", False, 0),
    ("statement_cache_size", True, 0),
    ("max_cached_statement_lifetime", False, 0),
    ("max_cacheable_statement_size", True, 0),
)


def _connect_args(raw: Any) -> ConnectArgs:
    path = f"{_PREFIX}.connect_args"
    if raw is None:
        return ConnectArgs()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a mapping")
    _unknown(raw, (*(k for k, _, _ in _CONNECT_NUMBERS), "command_timeout", "server_settings"), path)
    values: dict[str, Any] = {}
    for key, integer, minimum in _CONNECT_NUMBERS:
        if key in raw:
            values[key] = _number(raw, key, path, integer=integer, minimum=minimum)
    if raw.get("command_timeout") is not None:
        values["command_timeout"] = _number(raw, "command_timeout", path, integer=False, minimum=0, strict_min=True)
    settings = raw.get("server_settings")
    if settings is not None:
        if not isinstance(settings, dict):
            raise ConfigError(f"{path}.server_settings must be a mapping")
        if READ_ONLY_SETTING in settings:
            raise ConfigError(f"{path}.server_settings.{READ_ONLY_SETTING} is controlled by read_only")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in settings.items()):
            raise ConfigError(f"{path}.server_settings must contain only string keys and values")
        values["server_settings"] = dict(settings)
    return ConnectArgs(**values)


def parse_postgres_config(raw: Any) -> PostgresConfig:
    """Validate a ``database.postgres`` value (None means every default); raises ConfigError."""
    if raw is None:
        return PostgresConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{_PREFIX} must be a mapping")
    _unknown(raw, (*(k for k, _, _ in _POOL_NUMBERS), *_POOL_FLAGS, "connect_args"), _PREFIX)
    values: dict[str, Any] = {}
    for key, integer, minimum in _POOL_NUMBERS:
        if key in raw:
            values[key] = _number(raw, key, _PREFIX, integer=integer, minimum=minimum)
    for key in _POOL_FLAGS:
        if key in raw:
            values[key] = _boolean(raw, key)
    values["connect_args"] = _connect_args(raw.get("connect_args"))
    return PostgresConfig(**values)


def load_postgres_config(home: Path | None) -> PostgresConfig:
    """Read ``database.postgres`` from ``<home>/config.yaml``; raises ConfigError naming the key."""
    database = load_raw_config(home).get("database")
    if database is None:
        return PostgresConfig()
    if not isinstance(database, dict):
        raise ConfigError("database must be a mapping")
    return parse_postgres_config(database.get("postgres"))
