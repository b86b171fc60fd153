"""Event loops in daemon threads, for synchronous hosts of a ``SessionDB``.

A store serves callers on any event loop (see the README, "Event loops and
threads"), but synchronous code (a script, a WSGI worker, LangChain's sync
``invoke``) has none to await on. ``LoopThread`` is a loop the host owns;
:func:`store_loop` is the store's own loop thread, which synchronous calls
use when the host gives none and which stops when the store closes
(:func:`close_store` closes a store from synchronous code).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..home_loop import LoopThread as _LoopThread

__all__ = ["LoopThread", "run_on_loop", "store_loop", "close_store"]

T = TypeVar("T")


class LoopThread(_LoopThread):
    """Runs a private event loop in a daemon thread until :meth:`close`.

    ``run(coro)`` executes a coroutine on it and returns its result, so a
    synchronous program can open, use and close a store::

        with LoopThread() as background:
            db = SessionDB(path)
            history = HermesChatMessageHistory("chat-1", db, loop=background.loop)
            history.add_user_message("hi")
            background.run(db.close())
    """

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the background loop; returns its result (or raises its exception)."""
        return run_on_loop(self.loop, coro)

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on ``loop``, which runs in another thread, and wait for its result.

    Raises ``RuntimeError`` (and closes ``coro``) when called from ``loop``'s
    own thread, where blocking would deadlock, or when ``loop`` is not running.
    """
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        coro.close()
        raise RuntimeError("a synchronous call cannot wait on its own event loop; await the async method instead")
    if loop.is_closed() or not loop.is_running():
        coro.close()
        raise RuntimeError("the store's event loop is not running; run it in another thread (see LoopThread)")
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


def store_loop(db: Any) -> asyncio.AbstractEventLoop:
    """The store's own loop thread, started now if needed; returns its loop.

    Synchronous code runs ``db``'s coroutines there; the store moves its home
    to it at the first call (waiting for calls still running on its old
    home). The thread stops once the store is closed: by :func:`close_store`,
    by ``await db.close()`` on any loop, or at the interpreter's exit.
    """
    return db._own_loop()  # type: ignore[no-any-return]


def close_store(db: Any, timeout: float | None = None) -> None:
    """Close ``db`` from synchronous code: every queued write commits, then the connections close.

    Runs the close on the store's own loop thread and waits for it, and for
    that thread to stop. Idempotent. Raises ``RuntimeError`` on the thread of
    the store's home loop (``await db.close()`` there instead).
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None and running is db.loop:
        raise RuntimeError("close_store() would block the store's own event loop; use `await db.close()` there")
    own = db._own
    if not db.closed:
        if db.loop is None and own is None:
            asyncio.run(db.close())  # never used: nothing to drain, no thread to start
            return
        run_on_loop(store_loop(db), db.close(), timeout)
        own = db._own
    if own is not None:
        own.stop()
        if own.thread.is_alive():
            own.thread.join(timeout)
