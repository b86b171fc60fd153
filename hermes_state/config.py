"""Where the store lives and what the active profile's ``config.yaml`` says.

``HERMES_HOME`` (default ``~/.hermes``) is the profile directory. Its
``config.yaml`` is optional; the sections this package reads are validated
into msgspec structs, and a bad value raises :class:`ConfigError` naming the
key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from .errors import ConfigError
from .paths import default_db_path, hermes_home

__all__ = [
    "hermes_home",
    "default_db_path",
    "DatabaseConfig",
    "SessionsConfig",
    "StoreConfig",
    "load_config",
    "load_raw_config",
]


class DatabaseConfig(msgspec.Struct, forbid_unknown_fields=False, kw_only=True):
    """The ``database`` section (SQLite pragmas and journal mode)."""

    journal_mode: Literal["wal", "delete"] = "wal"
    synchronous: Literal["full", "normal", "extra"] = "full"
    cache_size: int | None = None
    mmap_size: int | None = None
    temp_store: int | None = None
    wal_autocheckpoint: int | None = None
    journal_size_limit: int | None = None
    # Query-only connections reads are spread over (each has its own thread).
    read_connections: Annotated[int, msgspec.Meta(ge=1, le=32)] = 2


class SessionsConfig(msgspec.Struct, forbid_unknown_fields=False, kw_only=True):
    """The ``sessions`` section."""

    max_resume_messages: int = 20000
    max_export_messages: int = 20000
    cjk_fts: bool = True
    # search_messages logs its route when it takes at least this long (env HERMES_SEARCH_SLOW_MS wins).
    search_slow_ms: float = 1000.0
    # search_messages is interrupted after this long (SearchTimeoutError); 0 turns the deadline off.
    search_timeout_ms: Annotated[float, msgspec.Meta(ge=0)] = 10000.0


class StoreConfig(msgspec.Struct, forbid_unknown_fields=False, kw_only=True):
    """The parts of ``config.yaml`` the store reads."""

    database: DatabaseConfig = msgspec.field(default_factory=DatabaseConfig)
    sessions: SessionsConfig = msgspec.field(default_factory=SessionsConfig)


def _normalise(raw: Any) -> Any:
    """Lower-case the enum-like strings so ``WAL`` and ``wal`` mean the same."""
    if isinstance(raw, dict):
        db = raw.get("database")
        if isinstance(db, dict):
            for key in ("journal_mode", "synchronous"):
                if isinstance(db.get(key), str):
                    db[key] = db[key].strip().lower()
    return raw


def load_raw_config(home: Path | None = None) -> dict[str, Any]:
    """Read ``<home>/config.yaml`` as a mapping (``{}`` when missing or empty).

    Raises :class:`ConfigError` when the file cannot be read, is not YAML, or
    does not hold a mapping at the top level.
    """
    path = (home or hermes_home()) / "config.yaml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping at the top level")
    return raw


def load_config(home: Path | None = None) -> StoreConfig:
    """Read and validate ``<home>/config.yaml``; a missing file gives defaults.

    Raises :class:`ConfigError` with the offending key path when a value has
    the wrong type or is not one of the allowed choices.
    """
    raw = load_raw_config(home)
    if not raw:
        return StoreConfig()
    try:
        return msgspec.convert(_normalise(raw), StoreConfig, strict=False)
    except msgspec.ValidationError as exc:
        # msgspec names the path, e.g. "Expected `int`, got `str` - at `$.database.cache_size`".
        path = (home or hermes_home()) / "config.yaml"
        raise ConfigError(f"{path}: {exc}") from exc
