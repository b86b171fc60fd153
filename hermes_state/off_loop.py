"""The store's blocking work (file system, ``/proc``, config files), off the event loop on threads of its own.

Not the loop's default executor: hosts fill that one with blocking work of their
own (tool calls, ``asyncio.to_thread``), and opening a store or judging a lease
holder would queue behind it. async-hermes-agent's turns go further and assert
that they never call ``asyncio.to_thread``, which a store they borrow must respect.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["MAX_THREADS", "off_loop"]

T = TypeVar("T")

MAX_THREADS = 8  # per process; each call is short (a stat, a small file, a directory listing)

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="hermes-state-io")
            pool = _pool
    return pool


def _forget_after_fork() -> None:
    # A forked child has none of the parent's threads (nor a lock one of them held): start afresh.
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on a worker thread of the store's, in the caller's context; returns its result.

    As with ``asyncio.to_thread``, a cancelled caller stops waiting while the call runs to its end.
    """
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor(), call)
