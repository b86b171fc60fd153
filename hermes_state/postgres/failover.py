"""What a writable store does when its server fails over: find the writable host, or say there is none.

A writable store connects with libpq's ``target_session_attrs=read-write``
unless the URL names another value, so with a host list (see :mod:`.hosts`)
it lands on the primary, skipping standbys and servers set read-only. A
server that turns read-only under an open connection (a demoted or fenced
primary) answers writes with SQLSTATE 25006; the writer then drops that
connection and reconnects, which again picks a writable host. When none is
writable the error says so and names the hosts, instead of a raw driver
error.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..errors import DatabaseUnavailableError
from .client_files import Connector
from .errors import unavailable

__all__ = [
    "DEFAULT_COMMIT_OUTCOME_TIMEOUT",
    "connect_at",
    "connect_error",
    "is_read_only_error",
    "no_writable_server",
    "writable_target",
]

# How long a writer keeps reconnecting to learn whether a batch whose COMMIT reply was lost
# committed: longer than a typical failover (detection plus promotion takes seconds to tens of
# seconds), bounded so a caller is never stuck.
DEFAULT_COMMIT_OUTCOME_TIMEOUT = 30.0
READ_ONLY_SQLSTATE = "25006"


def is_read_only_error(exc: BaseException) -> bool:
    """True for "cannot execute ... in a read-only transaction" (the server is a standby or set read-only)."""
    return str(getattr(exc, "sqlstate", "") or "") == READ_ONLY_SQLSTATE


def writable_target(dsn: str) -> dict[str, Any]:
    """``target_session_attrs=read-write`` for ``asyncpg.connect``, unless the URL chooses its own."""
    if any(key == "target_session_attrs" for key, _ in parse_qsl(urlsplit(dsn).query)):
        return {}
    return {"target_session_attrs": "read-write"}


def no_writable_server(where: str, exc: BaseException | None = None) -> DatabaseUnavailableError:
    """The error for a writable store whose server(s) only accept reads; names the hosts."""
    detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    err = DatabaseUnavailableError(
        f"no writable PostgreSQL server at {where}: each one reachable is a standby or read-only{detail}; "
        "a writable SessionDB needs the primary (list it in the URL, e.g. "
        "postgresql+asyncpg://primary:5432,standby:5432/db) or read_only=True"
    )
    err.__cause__ = exc
    return err


def connect_error(where: str, exc: BaseException) -> DatabaseUnavailableError | None:
    """The store's error for a failed ``asyncpg.connect`` to ``where``, or None to let ``exc`` through."""
    import asyncpg  # type: ignore[import-untyped]

    if isinstance(exc, asyncpg.TargetServerAttributeNotMatched):
        return no_writable_server(where, exc)
    if isinstance(exc, (OSError, asyncio.TimeoutError)):
        return unavailable(where, exc)
    return None


async def connect_at(connector: Connector, where: str) -> Any:
    """A new connection from ``connector``; a failure to reach ``where`` raises the store's error naming it."""
    try:
        return await connector.connect()
    except Exception as exc:
        err = connect_error(where, exc)
        if err is None:
            raise
        raise err from exc
