"""Wake turn-lease waiters when a lease is released, instead of making them poll.

One registry per process, shared by every store in it: waiters register
under ``(database identity, conversation id)`` and a release through any
store on that database (or, on PostgreSQL, a NOTIFY from another process)
wakes them at once. Stores may run on different event loops and the
PostgreSQL listener calls back from its connection, so an event is set
through its own loop with ``call_soon_threadsafe``.

A wake-up only says "look again": the waiter still acquires through a write
transaction, where the lease row decides. A missed or spurious wake-up costs
at most one poll interval.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["notify_release", "release_waiter"]

_Key = tuple[str, str]
_lock = threading.Lock()
_waiters: dict[_Key, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


@contextmanager
def release_waiter(database: str, conversation_id: str) -> Iterator[asyncio.Event]:
    """An event set whenever a lease of ``conversation_id`` on ``database`` is released, while the block runs."""
    entry = (asyncio.get_running_loop(), asyncio.Event())
    key = (database, conversation_id)
    with _lock:
        _waiters.setdefault(key, set()).add(entry)
    try:
        yield entry[1]
    finally:
        with _lock:
            waiting = _waiters.get(key)
            if waiting is not None:
                waiting.discard(entry)
                if not waiting:
                    del _waiters[key]


def notify_release(database: str, conversation_id: str) -> int:
    """Wake every waiter of ``conversation_id`` on ``database``; returns how many were waiting."""
    with _lock:
        entries = list(_waiters.get((database, conversation_id), ()))
    for loop, event in entries:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that waiter's loop closed meanwhile
            pass
    return len(entries)
