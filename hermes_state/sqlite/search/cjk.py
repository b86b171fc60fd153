"""The optional ``cjk_unicode61`` tokenizer: where its library is and how it is loaded.

The library (``native/fts5_cjk``) is found at ``$HERMES_FTS5_CJK_SO`` or
``<HERMES_HOME>/lib/libfts5_cjk.so`` and loaded into both connections of a
store unless the turn's bound setting, env ``HERMES_CJK_FTS`` or config ``sessions.cjk_fts`` says
``0``/``false``/``off``/``no``. Without it, CJK queries use the trigram and
LIKE routes; nothing else changes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ...config import hermes_home
from ...session_settings import bound_session_setting

# Synchronous: they run on connection threads (hermes_state.compat holds the
# public coroutines fts5_cjk_so_path and load_fts5_cjk_extension).
__all__ = ["CJK_TOKENIZER", "cjk_fts_enabled", "cjk_library_path", "load_cjk_tokenizer"]

log = logging.getLogger("hermes_state.sqlite.search")

CJK_TOKENIZER = "cjk_unicode61"
_OFF = frozenset({"0", "false", "off", "no"})


def cjk_library_path(home: Path | None = None) -> Path:
    """Return where the tokenizer library is expected (it may not exist)."""
    override = os.environ.get("HERMES_FTS5_CJK_SO", "").strip()
    if override:
        return Path(override).expanduser()
    return (home or hermes_home()) / "lib" / "libfts5_cjk.so"


def cjk_fts_enabled(config: Any = None) -> bool:
    """Whether CJK indexing is wanted (default on).

    The value bound for the current turn (:mod:`hermes_state.session_settings`)
    wins over env ``HERMES_CJK_FTS``, which wins over config
    ``sessions.cjk_fts``. ``config`` is a ``StoreConfig``; None reads the
    active profile's ``config.yaml``.
    """
    bound = bound_session_setting("cjk_fts")
    if bound is not None:
        return _switch(bound)
    raw = os.environ.get("HERMES_CJK_FTS")
    if raw is not None and raw.strip():
        return raw.strip().lower() not in _OFF
    if config is None:
        from ...config import load_config
        from ...errors import ConfigError

        try:
            config = load_config()
        except ConfigError as exc:  # a broken config.yaml is reported by the store's own open
            log.debug("config unreadable while checking sessions.cjk_fts: %s", exc)
            return True
    return _switch(getattr(getattr(config, "sessions", None), "cjk_fts", True))


def _switch(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _OFF
    return bool(value)


def load_cjk_tokenizer(
    conn: Any, *, config: Any = None, home: Path | None = None, enabled: bool | None = None
) -> bool:
    """Load the tokenizer into ``conn`` (a DB-API connection); returns True when it is usable.

    ``enabled`` is the switch when the caller resolved it already (on the
    opening task, where a turn's bound setting is visible; this runs on the
    connection's thread). Never raises: the feature switched off, a missing library, a driver
    without extension loading, or a library that fails to initialise all
    return False (CJK indexing is optional).
    """
    if not (cjk_fts_enabled(config) if enabled is None else enabled):
        return False
    target = cjk_library_path(home)
    if not target.is_file():
        return False
    enable = getattr(conn, "enable_load_extension", None)
    if enable is None:
        log.debug("this SQLite driver cannot load extensions; CJK index disabled")
        return False
    try:
        enable(True)
        try:
            conn.load_extension(str(target))
        finally:
            enable(False)
        conn.execute("SELECT fts5_cjk_version()").fetchone()
    except Exception as exc:  # noqa: BLE001 - optional feature: any failure means "not loaded"
        log.warning("could not load the CJK tokenizer from %s: %s", target, exc)
        return False
    return True


# The reference store's private name for the switch, imported by some callers.
_cjk_fts_config_enabled = cjk_fts_enabled
