"""How asyncpg's exceptions reach callers: the store's (SQLite-compatible) classes where one fits.

Handlers raise the store's own errors (``SessionNotFoundError`` and friends)
for every failure they check for, with the same class and message as on
SQLite; this module covers what only the server detects.
"""

from __future__ import annotations

from ..errors import DatabaseUnavailableError, IntegrityError, LockTimeoutError, StatementTimeoutError

__all__ = [
    "BUSY_SQLSTATES", "DISCONNECT_SQLSTATES", "TransactionPoolerError", "is_busy", "is_disconnect",
    "is_pooler_symptom", "pooler_error", "to_store_error", "unavailable",
]

# Deadlock, serialization failure: another process holds what we need; worth a retry.
# (lock_timeout, 55P03, is not: the caller chose that limit; it gets LockTimeoutError.)
BUSY_SQLSTATES = frozenset({"40P01", "40001"})
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
    if is_pooler_symptom(exc):  # 08P01 from a pooler's mix-up: the session itself is fine
        return False
    return (
        # InternalClientError: the protocol state broke (e.g. a termination notice raced a
        # statement); the connection cannot be used again either.
        isinstance(exc, (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError, ConnectionError))
        or any(state.startswith(prefix) for prefix in DISCONNECT_SQLSTATES)
    )


def to_store_error(exc: BaseException) -> BaseException:
    """Map server errors to the store's classes; others pass through.

    Constraint violations become ``IntegrityError`` worded like SQLite's, NUL
    in text a ``ValueError``, statement_timeout ``StatementTimeoutError`` and
    lock_timeout ``LockTimeoutError``.
    """
    state = _sqlstate(exc)
    err: Exception
    if is_pooler_symptom(exc):
        return pooler_error(exc)
    if state == "57014":  # query_canceled: statement_timeout (a cancelled task never gets here)
        err = StatementTimeoutError(f"PostgreSQL cancelled the statement: statement_timeout reached ({exc})")
    elif state == "55P03":
        err = LockTimeoutError(f"PostgreSQL gave up waiting for a lock: lock_timeout reached ({exc})")
    elif state == "22021":  # character_not_in_repertoire: TEXT cannot hold NUL
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


class TransactionPoolerError(RuntimeError):
    """The server connection is lent out by a transaction pooler the store was not told about.

    Symptoms: a named prepared statement that does not exist (or already
    does) on the server connection a statement landed on, a bind that does
    not match its statement, a startup parameter the pooler refuses. The
    fix is ``pooler=transaction`` in the URL (or ``database.postgres.pooler:
    transaction``): see docs/postgres-operations.md, "Behind a connection pooler".
    """


POOLER_FIX = (
    "add pooler=transaction to the URL (or database.postgres.pooler: transaction in config.yaml) "
    "so the store uses no server-side prepared statements and sends its settings inside each transaction"
)


def is_pooler_symptom(exc: BaseException) -> bool:
    """True for the errors a transaction pooler causes when connections assume a server session of their own."""
    state = _sqlstate(exc)
    text = str(exc)
    # 26000: a named (or the unnamed) statement is missing on this server connection; 42P05: it exists
    # already. The store never prepares statements by name itself, so these come from the driver's cache.
    return (
        state in ("26000", "42P05")
        or (state == "08P01" and ("bind message supplies" in text or "unsupported startup parameter" in text))
        or (state == "22023" and '"jit"' in text)  # asyncpg's jit save/restore landed on another statement
    )


def pooler_error(exc: BaseException) -> TransactionPoolerError:
    """The one error every pooler symptom becomes: what happened, and the fix."""
    err = TransactionPoolerError(
        f"PostgreSQL reported {type(exc).__name__}: {exc}. This happens behind a transaction pooler "
        f"(PgBouncer pool_mode=transaction or a hosted pooler); {POOLER_FIX}"
    )
    err.__cause__ = exc
    return err
