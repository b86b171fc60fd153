"""Awaiting work that must finish even when the awaiting task is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["finish_owned"]

T = TypeVar("T")


async def finish_owned(work: Awaitable[T]) -> T:
    """Run ``work`` to completion through any number of cancellations of the caller; return its result.

    ``work`` becomes its own task, so cancelling the caller never tears it.
    If the caller was cancelled while waiting, the ``CancelledError`` is
    re-raised once the work is done. If the work itself was cancelled (e.g.
    the loop is shutting down), that cancellation propagates at once.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved, so a failure is never reported as unhandled
        raise asyncio.CancelledError()
    return task.result()
