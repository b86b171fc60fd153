"""How asyncpg's exceptions reach callers: the store's (SQLite-compatible) classes where one fits.

Handlers raise the store's own errors (``SessionNotFoundError`` and friends)
for every failure they check for, with the same class and message as on
SQLite; this module covers what only the server detects.
"""

from __future__ import annotations

from ..errors import DatabaseUnavailableError, IntegrityError

__all__ = ["BUSY_SQLSTATES", "DISCONNECT_SQLSTATES", "is_busy", "is_disconnect", "to_store_error", "unavailable"]

# Deadlock, serialization failure, lock_timeout: another process holds what we need; worth a retry.
BUSY_SQLSTATES = frozenset({"40P01", "40001", "55P03"})
# Connection exceptions, operator intervention (admin shutdown, crash), cannot-connect-now.
DISCONNECT_SQLSTATES = ("08", "57P01", "57P02", "57P03")

_CONSTRAINT_WORDS = {"23505": "UNIQUE", "23503": "FOREIGN KEY", "23502": "NOT NULL", "23514": "CHECK"}


def _sqlstate(exc: BaseException) -> str:
    return str(getattr(exc, "sqlstate", "") or "")


def is_busy(exc: BaseException) -> bool:
    """True for lock contention with another connection (the facade retries these)."""
    return _sqlstate(exc) in BUSY_SQLSTATES


def is_disconnect(exc: BaseException) -> bool:
    """True when the connection is gone (it must be replaced, not reused)."""
    import asyncpg  # type: ignore[import-untyped]

    state = _sqlstate(exc)
    return (
        isinstance(exc, (OSError, asyncpg.InterfaceError, ConnectionError))
        or any(state.startswith(prefix) for prefix in DISCONNECT_SQLSTATES)
    )


def to_store_error(exc: BaseException) -> BaseException:
    """Constraint violations become ``IntegrityError`` worded like SQLite's; NUL in text a ValueError; others pass through."""
    state = _sqlstate(exc)
    err: Exception
    if state == "22021":  # character_not_in_repertoire: TEXT cannot hold NUL
        err = ValueError(f"PostgreSQL text columns cannot store NUL characters ({exc})")
    elif state in _CONSTRAINT_WORDS:
        where = getattr(exc, "constraint_name", None) or getattr(exc, "table_name", None) or "?"
        err = IntegrityError(f"{_CONSTRAINT_WORDS[state]} constraint failed: {where} ({getattr(exc, 'detail', None) or exc})")
    else:
        return exc
    err.__cause__ = exc
    return err


def unavailable(endpoint: str, exc: BaseException) -> DatabaseUnavailableError:
    """The error for a server that cannot be reached: names host and port, never the password."""
    err = DatabaseUnavailableError(f"cannot connect to PostgreSQL at {endpoint}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err
