"""Wake turn-lease waiters when a lease is released, instead of making them poll.

One registry per process, shared by every store in it: waiters register
under ``(database identity, wake key)`` and a release through any store on
that database (or a notice from another process: PostgreSQL's NOTIFY, the
SQLite store's wake-up sockets) wakes them at once. The wake key is a fixed-size
digest of the conversation id, so a notice between processes stays small
whatever the id's length. Stores may run on different event loops and the
PostgreSQL listener calls back from its connection, so an event is set
through its own loop with ``call_soon_threadsafe``.

A wake-up only says "look again": the waiter still acquires through a write
transaction, where the lease row decides. A spurious wake-up costs a read; a
missed one at most a poll interval.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["notify_release", "release_waiter", "wake_key"]

_Key = tuple[str, str]
_lock = threading.Lock()
_waiters: dict[_Key, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


def wake_key(conversation_id: str) -> str:
    """The 32 hex digits naming ``conversation_id`` in wake-ups (PostgreSQL's ``md5(conversation_id)``)."""
    return hashlib.md5(conversation_id.encode("utf-8", "surrogatepass"), usedforsecurity=False).hexdigest()


@contextmanager
def release_waiter(database: str, conversation_id: str) -> Iterator[asyncio.Event]:
    """An event set whenever a lease of ``conversation_id`` on ``database`` is released, while the block runs."""
    entry = (asyncio.get_running_loop(), asyncio.Event())
    key = (database, wake_key(conversation_id))
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


def notify_release(database: str, key: str) -> int:
    """Wake every waiter of the conversation whose :func:`wake_key` is ``key``; returns how many were waiting."""
    with _lock:
        entries = list(_waiters.get((database, key), ()))
    for loop, event in entries:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # that waiter's loop closed meanwhile
            pass
    return len(entries)
