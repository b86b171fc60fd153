"""An event loop in a daemon thread, for synchronous hosts of a ``SessionDB``.

A store is bound to the event loop of its first awaited call. Synchronous
code (a script, a WSGI worker, LangChain's sync ``invoke``) that wants to use
one needs that loop running somewhere else; ``LoopThread`` is that somewhere.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "run_on_loop"]

T = TypeVar("T")


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

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="hermes-state-loop", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the background loop; returns its result (or raises its exception)."""
        return run_on_loop(self.loop, coro)

    def close(self) -> None:
        """Stop the loop and join its thread. Idempotent; returns None."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
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
    return asyncio.run_coroutine_threadsafe(coro, loop).result()
