"""Turn-lease arguments and the fence a transcript write carries.

Shared by the lease methods (``methods.leases``), ``SessionTurn`` and the
transcript writes (``methods.compression``, the store): the checks of a
holder and a TTL, and the context variable a ``SessionTurn`` sets around
its own writes so they carry its holder and fencing token.
"""

from __future__ import annotations

import contextvars
from typing import Any

from .commands.leases import TurnFence
from .limits import finite_arg

__all__ = ["MAX_HOLDER_LENGTH", "active_fence", "holder_arg", "session_arg", "transcript_fence", "ttl_arg"]

MAX_HOLDER_LENGTH = 1024
# The shortest lease upstream grants (a TTL of 0 is a 0.1 s lease).
MIN_TTL_SECONDS = 0.1

# The fence of the session_turn whose method is running (set only around that call).
_ACTIVE_FENCE: contextvars.ContextVar[TurnFence | None] = contextvars.ContextVar("hermes_turn_fence", default=None)


def active_fence() -> contextvars.ContextVar[TurnFence | None]:
    """The context variable a :class:`~hermes_state.session_turn.SessionTurn` sets around its writes."""
    return _ACTIVE_FENCE


def holder_arg(value: Any, name: str = "holder") -> str | None:
    """A lease holder: None for None or "" (upstream answers those with False), else a str of at most 1,024 characters."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if len(value) > MAX_HOLDER_LENGTH:
        raise ValueError(f"{name} must be at most {MAX_HOLDER_LENGTH} characters, got {len(value)}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def session_arg(value: Any) -> str | None:
    """A session id, None when empty (upstream answers an empty id with False)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"session_id must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("session_id must not contain NUL characters")
    return value


def ttl_arg(value: Any, name: str = "ttl_seconds") -> float:
    """A finite, non-negative number of seconds, raised to upstream's floor of 0.1 s."""
    seconds = finite_arg(value, name)
    if seconds < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return max(MIN_TTL_SECONDS, seconds)


def transcript_fence(turn_lease_holder: Any, turn_lease_ttl_seconds: Any) -> TurnFence | None:
    """The fence of one transcript write: its ``turn_lease_holder``, or the :meth:`session_turn` it runs in.

    An empty holder means no fence (upstream's contract). Naming another
    holder than the session turn's own is a ``ValueError``.
    """
    active = _ACTIVE_FENCE.get()
    holder = holder_arg(turn_lease_holder, "turn_lease_holder")
    ttl = ttl_arg(turn_lease_ttl_seconds, "turn_lease_ttl_seconds")
    if holder is None:
        return active
    if active is not None:
        if active.holder != holder:
            raise ValueError("turn_lease_holder differs from the holder of the session_turn this write runs in")
        return active
    return TurnFence(holder=holder, ttl_seconds=ttl)
