"""Event loops in daemon threads, for synchronous hosts of a ``SessionDB``.

A store is bound to the event loop of its first awaited call. Synchronous
code (a script, a WSGI worker, LangChain's sync ``invoke``) that wants to use
one needs that loop running somewhere else. ``LoopThread`` is a loop the
host owns; :func:`store_loop` gives a store that has no loop yet one of its
own, which stops when the store closes (:func:`close_store` closes a store
from synchronous code).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "run_on_loop", "store_loop", "close_store"]

log = logging.getLogger("hermes_state.integrations")
T = TypeVar("T")

# How often a store's own background loop looks whether the store was closed by other means.
CLOSE_POLL_SECONDS = 0.05
# How long the interpreter's exit waits for each store still open on a background loop.
EXIT_CLOSE_TIMEOUT = 30.0


class LoopThread:
    """Runs a private event loop in a daemon thread until :meth:`close`.

    ``run(coro)`` executes a coroutine on it and returns its result, so a
    synchronous program can open, use and close a store::

        with LoopThread() as background:
            db = SessionDB(path)
            history = HermesChatMessageHistory("chat-1", db, loop=background.loop)
            history.add_user_message("hi")
            background.run(db.close())
    """

    def __init__(self, name: str = "hermes-state-loop") -> None:
        self.loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the background loop; returns its result (or raises its exception)."""
        return run_on_loop(self.loop, coro)

    def close(self) -> None:
        """Stop the loop and join its thread. Idempotent; returns None."""
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed already
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join()

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


class _StoreLoop(LoopThread):
    """The background loop one store runs on for synchronous callers; it stops once the store is closed."""

    def __init__(self, db: Any) -> None:
        super().__init__(name="hermes-state-store-loop")
        self.db = db
        asyncio.run_coroutine_threadsafe(self._stop_after_close(), self.loop)

    async def _stop_after_close(self) -> None:
        # The store has no close hook for adapters: a short poll notices any close,
        # through close_store() or an awaited db.close() on this loop.
        while not self.db.closed:
            await asyncio.sleep(CLOSE_POLL_SECONDS)
        try:
            await self.db.close()  # joins the close in progress; returns once everything is committed
        except Exception:
            log.debug("closing a store on its background loop failed", exc_info=True)
        finally:
            with _lock:
                if _store_loops.get(id(self.db)) is self:
                    del _store_loops[id(self.db)]
            self.loop.stop()


_lock = threading.Lock()
_store_loops: dict[int, _StoreLoop] = {}


def store_loop(db: Any) -> asyncio.AbstractEventLoop:
    """The event loop synchronous code runs ``db``'s coroutines on; returns it.

    That is the loop the store is bound to, if any; otherwise a background
    loop thread started now for this store (the next call binds the store to
    it). That thread stops once the store is closed: by :func:`close_store`,
    by ``await db.close()`` on that loop, or at the interpreter's exit.
    """
    with _lock:
        if db.loop is not None:
            return db.loop  # type: ignore[no-any-return]
        own = _store_loops.get(id(db))
        if own is None or own.db is not db:
            own = _store_loops[id(db)] = _StoreLoop(db)
        return own.loop


def close_store(db: Any, timeout: float | None = None) -> None:
    """Close ``db`` from synchronous code: every queued write commits, then the connections close.

    Runs the close on the store's loop (another thread's), waits for it and,
    for a store on a background loop of its own (:func:`store_loop`), for that
    thread to stop. Idempotent. Raises ``RuntimeError`` on the store's own
    loop thread (``await db.close()`` there instead).
    """
    with _lock:
        own = _store_loops.get(id(db))
    loop = db.loop
    if loop is None:
        if own is None:
            asyncio.run(db.close())  # never used: nothing to drain, no loop to borrow
            return
        loop = own.loop
    if not (db.closed and not loop.is_running()):
        run_on_loop(loop, db.close(), timeout)
    if own is not None and own.db is db and threading.current_thread() is not own._thread:
        own._thread.join(timeout)  # it stops by itself once it sees the store closed


@atexit.register
def _close_stores_at_exit() -> None:
    """Stores still open on their background loops are closed before the interpreter stops their threads."""
    with _lock:
        pending = list(_store_loops.values())
    for own in pending:
        try:
            close_store(own.db, EXIT_CLOSE_TIMEOUT)
        except Exception:
            log.debug("closing a store at exit failed", exc_info=True)
