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
from .dsn import validate_dsn
from .libpq import READ_ONLY_SETTING, parse_options
from .pooler import POOLER_MODES

__all__ = ["ConnectArgs", "PostgresConfig", "load_postgres_config", "parse_postgres_config"]

_PREFIX = "database.postgres"


class ConnectArgs(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Keyword arguments for ``asyncpg.connect``, named as asyncpg names them (None = asyncpg's default).

    The psycopg/libpq keys of the configuration (``connect_timeout``,
    ``application_name``, ``options``, ``prepare_threshold``) arrive here
    already mapped onto these.
    """

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
    # Seconds to keep reconnecting to learn whether a write whose COMMIT reply was lost committed
    # (None: the URL's ``commit_outcome_timeout``, else the backend's default).
    commit_outcome_timeout: float | None = None
    # Read replicas (URLs; the constructor's ``read_replicas`` wins), skipped while they lag more
    # than ``replica_max_lag``; a read after this store's own write waits up to ``replica_wait``
    # for the replica to replay it, else reads from the primary.
    read_replicas: tuple[str, ...] = ()
    replica_max_lag: float = 5.0
    replica_wait: float = 0.25
    # "transaction": connections go through a transaction pooler (see ``pooler``); the URL's wins.
    pooler: str = "none"
    # A direct URL for the turn-lease LISTEN connection (a pooler drops notifications); the URL's wins.
    listen_url: str | None = None

    def connect_kwargs(self, *, read_only: bool, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """The keyword arguments every new connection gets; read-only forces the server setting.

        ``base`` holds what the URL sets (``dsn.url_connect_kwargs``); these
        options win over it, and their ``server_settings`` are merged over its.
        """
        kwargs = dict(base or {})
        settings = dict(kwargs.pop("server_settings", None) or {})
        own = {k: v for k, v in msgspec.structs.asdict(self.connect_args).items() if v is not None}
        settings.update(own.pop("server_settings", None) or {})
        kwargs.update(own)
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


# The libpq/psycopg names upstream's configuration uses, each mapped onto asyncpg's.
_LIBPQ_KEYS = ("connect_timeout", "prepare_threshold", "application_name", "options")


def _both(path: str, libpq: str, asyncpg: str) -> ConfigError:
    return ConfigError(f"{path}.{libpq} and {path}.{asyncpg} set the same thing; keep one of them")


def _libpq_args(raw: dict[str, Any], values: dict[str, Any], settings: dict[str, str], path: str) -> None:
    """Map the psycopg/libpq keys onto asyncpg's (``values``) and server settings (``settings``)."""
    if "connect_timeout" in raw:
        if "timeout" in raw:
            raise _both(path, "connect_timeout", "timeout")
        values["timeout"] = float(_number(raw, "connect_timeout", path, integer=True, minimum=1))
    if "prepare_threshold" in raw:
        if "statement_cache_size" in raw:
            raise _both(path, "prepare_threshold", "statement_cache_size")
        # null turns prepared statements off: asyncpg's statement cache off. asyncpg
        # prepares a statement on first use, so any count leaves them (and the cache) on.
        if raw["prepare_threshold"] is None:
            values["statement_cache_size"] = 0
        else:
            _number(raw, "prepare_threshold", path, integer=True, minimum=0)
    given: dict[str, str] = {}
    if "options" in raw:
        if not isinstance(raw["options"], str):
            raise ConfigError(f"{path}.options must be a string")
        try:
            given = parse_options(raw["options"])
        except ValueError as exc:
            raise ConfigError(f"{path}.options: {exc}") from None
    if "application_name" in raw:
        if not isinstance(raw["application_name"], str):
            raise ConfigError(f"{path}.application_name must be a string")
        if "application_name" in given:
            raise ConfigError(f"{path}.application_name is also set in {path}.options; keep one of them")
        given["application_name"] = raw["application_name"]
    for name, value in given.items():
        if name == READ_ONLY_SETTING:
            raise ConfigError(f"{path}.options sets {READ_ONLY_SETTING}, which is controlled by read_only")
        if name in settings:
            source = "application_name" if name == "application_name" and "application_name" in raw else "options"
            raise _both(path, source, f"server_settings.{name}")
        settings[name] = value


def _connect_args(raw: Any) -> ConnectArgs:
    path = f"{_PREFIX}.connect_args"
    if raw is None:
        return ConnectArgs()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must be a mapping")
    _unknown(raw, (*(k for k, _, _ in _CONNECT_NUMBERS), "command_timeout", "server_settings", *_LIBPQ_KEYS), path)
    values: dict[str, Any] = {}
    for key, integer, minimum in _CONNECT_NUMBERS:
        if key in raw:
            values[key] = _number(raw, key, path, integer=integer, minimum=minimum)
    if raw.get("command_timeout") is not None:
        values["command_timeout"] = _number(raw, "command_timeout", path, integer=False, minimum=0, strict_min=True)
    settings: dict[str, str] = {}
    server_settings = raw.get("server_settings")
    if server_settings is not None:
        if not isinstance(server_settings, dict):
            raise ConfigError(f"{path}.server_settings must be a mapping")
        if READ_ONLY_SETTING in server_settings:
            raise ConfigError(f"{path}.server_settings.{READ_ONLY_SETTING} is controlled by read_only")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in server_settings.items()):
            raise ConfigError(f"{path}.server_settings must contain only string keys and values")
        settings.update(server_settings)
    _libpq_args(raw, values, settings, path)
    if settings:
        values["server_settings"] = settings
    return ConnectArgs(**values)


_FAILOVER_KEYS = ("commit_outcome_timeout", "read_replicas", "replica_max_lag", "replica_wait")


def _failover_values(raw: dict[str, Any], values: dict[str, Any]) -> None:
    """The outcome window and read-replica keys."""
    for key, strict in (("commit_outcome_timeout", True), ("replica_max_lag", True), ("replica_wait", False)):
        if raw.get(key) is not None:
            values[key] = float(_number(raw, key, _PREFIX, integer=False, minimum=0, strict_min=strict))
    replicas = raw.get("read_replicas")
    if replicas is not None:
        if not isinstance(replicas, list) or not all(isinstance(url, str) for url in replicas):
            raise ConfigError(f"{_PREFIX}.read_replicas must be a list of postgresql+asyncpg:// URLs")
        for index, url in enumerate(replicas):
            try:
                validate_dsn(url)
            except ValueError as exc:
                raise ConfigError(f"{_PREFIX}.read_replicas[{index}]: {exc}") from None
        values["read_replicas"] = tuple(replicas)


def _store_options(raw: dict[str, Any], values: dict[str, Any]) -> None:
    if "pooler" in raw:
        if raw["pooler"] not in POOLER_MODES:
            raise ConfigError(f"{_PREFIX}.pooler must be one of {', '.join(POOLER_MODES)}")
        values["pooler"] = raw["pooler"]
    if raw.get("listen_url") is not None:
        try:
            values["listen_url"] = validate_dsn(raw["listen_url"])
        except ValueError as exc:
            raise ConfigError(f"{_PREFIX}.listen_url: {exc}") from None


def parse_postgres_config(raw: Any) -> PostgresConfig:
    """Validate a ``database.postgres`` value (None means every default); raises ConfigError."""
    if raw is None:
        return PostgresConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{_PREFIX} must be a mapping")
    _unknown(
        raw, (*(k for k, _, _ in _POOL_NUMBERS), *_POOL_FLAGS, "connect_args", *_FAILOVER_KEYS, "pooler", "listen_url"),
        _PREFIX,
    )
    values: dict[str, Any] = {}
    for key, integer, minimum in _POOL_NUMBERS:
        if key in raw:
            values[key] = _number(raw, key, _PREFIX, integer=integer, minimum=minimum)
    for key in _POOL_FLAGS:
        if key in raw:
            values[key] = _boolean(raw, key)
    _failover_values(raw, values)
    values["connect_args"] = _connect_args(raw.get("connect_args"))
    _store_options(raw, values)
    return PostgresConfig(**values)


def load_postgres_config(home: Path | None) -> PostgresConfig:
    """Read ``database.postgres`` from ``<home>/config.yaml``; raises ConfigError naming the key."""
    database = load_raw_config(home).get("database")
    if database is None:
        return PostgresConfig()
    if not isinstance(database, dict):
        raise ConfigError("database must be a mapping")
    return parse_postgres_config(database.get("postgres"))
