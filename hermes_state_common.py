"""Compatibility entry point for async-hermes-agent's ``hermes_state_common`` imports.

Its agent binds each turn's per-profile session settings with
``_set_session_runtime_config`` / ``_reset_session_runtime_config`` and its
session-search tool reads ``_RESET_END_REASONS``; the store honours the
bound settings (:mod:`hermes_state.session_settings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hermes_state.previews import escape_like
from hermes_state.rules import RESET_REASONS as _RESET_END_REASONS
from hermes_state.session_settings import _BOUND as _SESSION_RUNTIME_CONFIG
from hermes_state.session_settings import bind_session_settings as _set_session_runtime_config
from hermes_state.session_settings import reset_session_settings as _reset_session_runtime_config
from hermes_state.session_settings import session_setting_text as _session_runtime_config_value

if TYPE_CHECKING:
    from hermes_state import FTS_STORAGE_VERSION, SCHEMA_SQL, SCHEMA_VERSION

__all__ = [
    "FTS_STORAGE_VERSION",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "_RESET_END_REASONS",
    "_SESSION_RUNTIME_CONFIG",
    "_reset_session_runtime_config",
    "_session_runtime_config_value",
    "_set_session_runtime_config",
    "escape_like",
]

_SCHEMA_NAMES = ("FTS_STORAGE_VERSION", "SCHEMA_SQL", "SCHEMA_VERSION")


def __getattr__(name: str) -> Any:
    """The SQLite schema constants, loaded on first use (they pull in the SQLite backend)."""
    if name in _SCHEMA_NAMES:
        import hermes_state

        return getattr(hermes_state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
