"""The store's own event loop in a daemon thread, and handing a call to the loop the store runs on.

A store does its I/O on one event loop at a time, its home (see
``facade.StoreBase``). A caller on another loop hands its call over with
:func:`hand_off`: the coroutine runs on the home loop and the caller awaits
its result on its own loop; cancelling the caller cancels the handed call.
When several loops use a store at once, the home is a :class:`LoopThread`
the store owns, which only stops when the store closes, so a handed call
never waits on a loop that may stop under it.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "hand_off", "remember_own_loop"]

log = logging.getLogger("hermes_state")
T = TypeVar("T")


class LoopThread:
    """Runs a private event loop in a daemon thread until :meth:`close`."""

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

    @property
    def thread(self) -> threading.Thread:
        """The thread the loop runs in."""
        return self._thread

    def stop(self) -> None:
        """Ask the loop to stop (from any thread, its own included); returns at once."""
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:  # closed already
            pass

    def close(self) -> None:
        """Stop the loop and join its thread (unless called from it). Idempotent; returns None."""
        self.stop()
        if threading.current_thread() is not self._thread:
            self._thread.join()


async def hand_off(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``loop`` (another thread's) and return its result on the running loop."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


# Stores that run on a loop thread of their own, closed at the interpreter's exit.
_stores: weakref.WeakSet[Any] = weakref.WeakSet()
EXIT_CLOSE_TIMEOUT = 30.0


def remember_own_loop(db: Any) -> None:
    """Close ``db`` at the interpreter's exit if it still runs on its own loop thread then.

    A store dropped without ``close()`` stops its loop thread when it is collected.
    """
    _stores.add(db)
    # Not at exit: _close_at_exit closes the store there, on this very loop.
    weakref.finalize(db, db._own.stop).atexit = False


@atexit.register
def _close_at_exit() -> None:
    for db in list(_stores):
        own = getattr(db, "_own", None)
        if own is None or db.closed or own.loop.is_closed():
            continue
        try:
            asyncio.run_coroutine_threadsafe(db.close(), own.loop).result(EXIT_CLOSE_TIMEOUT)
        except Exception:  # best effort: every acknowledged write is committed already
            log.debug("closing a store at exit failed", exc_info=True)
        own.close()
