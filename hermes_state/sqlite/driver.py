"""Which SQLite library the store runs on, and how connections are opened.

The bundled ``pysqlite3`` wheel ships a current SQLite (FTS5, trigram,
extension loading, and outside the WAL-reset corruption range); the
interpreter's ``sqlite3`` is the fallback. ``HERMES_SQLITE_DRIVER`` set to
``sqlite3`` or ``pysqlite3`` forces one.

aiosqlite runs every call for a connection on that connection's own thread.
The store hands it whole functions (a batch of writes, a compound read) so
one thread hop does all the work; :func:`run_on` is that one place.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from types import ModuleType
from typing import Any, Callable, TypeVar

import aiosqlite

__all__ = [
    "driver_module",
    "driver_name",
    "sqlite_version_info",
    "is_sqlite_wal_reset_vulnerable",
    "open_connection",
    "run_on",
    "submit",
    "post",
    "to_stdlib_error",
]

T = TypeVar("T")


@functools.lru_cache(maxsize=None)
def driver_module() -> ModuleType:
    """Return the DB-API module in use (``pysqlite3.dbapi2`` or ``sqlite3``)."""
    wanted = os.environ.get("HERMES_SQLITE_DRIVER", "").strip().lower()
    if wanted == "sqlite3":
        return sqlite3
    try:
        from pysqlite3 import dbapi2  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        if wanted == "pysqlite3":
            raise ImportError(
                "HERMES_SQLITE_DRIVER=pysqlite3 but the pysqlite3 package is not installed"
            ) from None
        return sqlite3
    return dbapi2


def driver_name() -> str:
    """Return ``"pysqlite3"`` or ``"sqlite3"``."""
    return "sqlite3" if driver_module() is sqlite3 else "pysqlite3"


def sqlite_version_info() -> tuple[int, int, int]:
    """Return the linked SQLite library version as a 3-tuple."""
    parts = (driver_module().sqlite_version.split(".") + ["0", "0"])[:3]
    return (int(parts[0]), int(parts[1]), int(parts[2]))


def is_sqlite_wal_reset_vulnerable(version_info: tuple[int, ...] | None = None) -> bool:
    """True for SQLite 3.7.0 up to 3.51.3 except the patched 3.44.6+ and 3.50.7+ lines.

    ``version_info`` defaults to the linked SQLite's; a shorter tuple counts missing parts as 0.
    """
    given = tuple(int(part) for part in version_info[:3]) if version_info else sqlite_version_info()
    v = given + (0,) * (3 - len(given))
    if not ((3, 7, 0) <= v < (3, 51, 3)):
        return False
    if (3, 50, 7) <= v < (3, 51, 0) or (3, 44, 6) <= v < (3, 45, 0):
        return False
    return True


def _connect(database: str, uri: bool, timeout: float) -> Any:
    mod = driver_module()
    conn = mod.connect(
        database,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=False,
        uri=uri,
        cached_statements=256,
    )
    return conn


async def open_connection(database: str, *, uri: bool = False, timeout: float = 1.0) -> aiosqlite.Connection:
    """Open an aiosqlite connection on the selected driver, in autocommit mode."""
    conn = aiosqlite.Connection(functools.partial(_connect, database, uri, timeout), iter_chunk_size=256)
    # A host that forgets ``close()`` must still be able to exit: aiosqlite's
    # worker thread is non-daemon and would block interpreter shutdown forever.
    # Every acknowledged write is already committed, so nothing durable is lost.
    conn._thread.daemon = True
    try:
        return await conn
    except asyncio.CancelledError:
        await _stop_after_connect(conn)
        raise
    except Exception as exc:
        raise to_stdlib_error(exc) from None


async def _stop_after_connect(conn: aiosqlite.Connection) -> None:
    """After a cancelled open: wait, with this loop still running, for the connection's thread to end.

    The connect goes on in that thread whatever the caller does (aiosqlite
    queues the thread's stop behind it). A thread that finished after the loop
    closed would fail to report back to it: a traceback on stderr.
    """
    while conn._thread.is_alive():
        try:
            await asyncio.sleep(0.002)
        except asyncio.CancelledError:  # cancelled again: the wait is one connect long, finish it
            continue


async def run_on(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(raw_connection, *args)`` on the connection's own thread.

    Errors from the driver come back as the equivalent stdlib ``sqlite3``
    exception so callers see one set of classes whichever driver is in use.
    """
    raw = conn._conn  # the underlying DB-API connection; only touched on its thread
    try:
        return await conn._execute(fn, raw, *args)
    except Exception as exc:
        converted = to_stdlib_error(exc)
        if converted is exc:
            raise
        raise converted from None


def submit(conn: aiosqlite.Connection, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Queue ``fn(raw_connection, *args)`` on the connection's thread; returns its future.

    Like :func:`run_on` without a coroutine around it, for callers that
    must keep track of the work after they stop waiting for it (the future
    resolves when the thread is done). Errors are the driver's own: pass
    them through :func:`to_stdlib_error`. Raises ``ValueError`` on a closed
    connection.
    """
    if not conn._running or conn._connection is None:
        raise ValueError("Connection closed")
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    conn._tx.put_nowait((future, functools.partial(fn, conn._connection, *args)))
    return future


def post(
    conn: aiosqlite.Connection,
    fn: Callable[..., T],
    args: tuple[Any, ...],
    done: Callable[[T | None, BaseException | None], None],
) -> None:
    """Queue ``fn(raw_connection, *args)`` on the connection's thread; ``done(result, error)`` runs on this loop.

    The thread calls back straight onto the event loop, with no future and
    no task in between (aiosqlite skips its own callback for an item without
    a future). ``error`` is already a stdlib ``sqlite3`` exception. Raises
    ``ValueError`` on a closed connection.
    """
    if not conn._running or conn._connection is None:
        raise ValueError("Connection closed")
    loop = asyncio.get_running_loop()
    raw = conn._connection

    def work() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn(raw, *args)
        except BaseException as exc:  # noqa: BLE001 - every error is handed to ``done``
            error = to_stdlib_error(exc)
        try:
            loop.call_soon_threadsafe(done, result, error)
        except RuntimeError:  # the loop is closed: nobody waits for this any more
            pass

    conn._tx.put_nowait((None, work))


def to_stdlib_error(exc: BaseException) -> BaseException:
    """Map a ``pysqlite3`` exception onto the same-named ``sqlite3`` class."""
    mod = driver_module()
    if mod is sqlite3 or not isinstance(exc, mod.Error):
        return exc
    target = getattr(sqlite3, type(exc).__name__, sqlite3.DatabaseError)
    new = target(*exc.args)
    for attr in ("sqlite_errorcode", "sqlite_errorname"):
        if hasattr(exc, attr):
            try:
                setattr(new, attr, getattr(exc, attr))
            except AttributeError:
                pass
    new.__traceback__ = exc.__traceback__
    return new


def is_driver_error(exc: BaseException) -> bool:
    """True for any SQLite error from either driver."""
    return isinstance(exc, (sqlite3.Error, driver_module().Error))

