"""Session settings a host binds for one turn: per-profile values that win over the process-wide ones.

A process that runs agents of several profiles cannot publish one profile's
``sessions.cjk_fts`` or ``sessions.search_slow_ms`` through the environment
without the other agents seeing it. The host binds each agent's values to the
task that runs its turn instead (a ``ContextVar``: concurrent turns each see
their own), and the store reads them where it reads the setting: the store's
open (``cjk_fts``) and each ``search_messages`` (``search_slow_ms``). Order:
the bound value, then the environment variable, then ``config.yaml``.

async-hermes-agent's agent binds them through ``hermes_state_common``'s
``_set_session_runtime_config`` / ``_reset_session_runtime_config``; that
module (shipped with hermes-state) re-exports these under those names.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["bind_session_settings", "bound_session_setting", "reset_session_settings", "session_setting_text"]

_BOUND: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("session_runtime_config", default=None)


def bind_session_settings(values: Mapping[str, Any] | None) -> contextvars.Token[Mapping[str, Any] | None]:
    """Bind ``values`` (e.g. ``{"cjk_fts": False, "search_slow_ms": 250}``) to the current context; returns the token.

    None binds nothing (the process-wide settings apply). Pass the token to
    :func:`reset_session_settings` when the turn ends.
    """
    if values is not None and not isinstance(values, Mapping):
        raise TypeError(f"values must be a mapping or None, not {type(values).__name__}")
    return _BOUND.set(values)


def reset_session_settings(token: contextvars.Token[Mapping[str, Any] | None]) -> None:
    """Restore the binding that was in effect before :func:`bind_session_settings` returned ``token``."""
    _BOUND.reset(token)


def bound_session_setting(name: str) -> Any | None:
    """The value bound for ``name`` in the current context, or None when none is bound."""
    values = _BOUND.get()
    if values is None:
        return None
    return values.get(name)


def session_setting_text(name: str, env_name: str, default: str) -> str:
    """The bound value of ``name`` as text, else environment variable ``env_name``, else ``default``."""
    values = _BOUND.get()
    if values is not None and name in values:
        return str(values[name])
    return os.getenv(env_name, default)
