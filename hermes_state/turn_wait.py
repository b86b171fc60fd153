"""How a turn-lease waiter spends its time between looks: callbacks, sleeping, judging a lease row.

Used by ``methods.leases`` (the wait loop) and ``session_turn`` (telling an
abort from a timeout); neither imports the other for these.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from .rules import turn_lease_takeover_on_loop

__all__ = ["ABORT_CHECK_SECONDS", "aborted", "could_acquire", "first_in_line", "notify_wait", "sleep_until"]

log = logging.getLogger("hermes_state")

# How often a waiter with a ``should_abort`` callback asks it while it sleeps.
ABORT_CHECK_SECONDS = 0.05


async def could_acquire(state: dict[str, Any], holder: str, exclusive: bool) -> bool:
    """Whether the lease row and queue read by ``turn_lease_state`` would let ``holder`` acquire now.

    A judgement that reads ``/proc`` (a local holder) runs on a worker thread.
    """
    if state["holder"] is not None:
        verdict = await turn_lease_takeover_on_loop(
            holder, exclusive, state["holder"], state["expires_at"], state["holder_host"], state["holder_pid"],
            state["holder_started"], state["now"],
        )
        if verdict == "held":
            return True
        if verdict == "busy":
            return False
    return first_in_line(state)


def first_in_line(state: dict[str, Any] | None) -> bool:
    """Whether no live waiter was queued ahead in the look ``state``.

    Waiters ahead count until their ticket expires; whether their process
    still runs is judged by the acquire's transaction (off the event loop),
    which a waiter opens at least every renewal.
    """
    return state is not None and not any(float(w[0]) > state["now"] for w in state.get("ahead", ()))


def aborted(should_abort: Callable[[], bool] | None) -> bool:
    """What ``should_abort`` says; a raising callback counts as "do not abort"."""
    if should_abort is None:
        return False
    try:
        return bool(should_abort())
    except Exception:
        log.debug("should_abort raised; not aborting", exc_info=True)
        return False


async def notify_wait(on_wait: Callable[..., Any], elapsed: float) -> None:
    """Call ``on_wait(elapsed)`` (awaiting what it returns); what it raises is logged and ignored."""
    try:
        result = on_wait(elapsed)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except Exception:
        log.debug("on_wait raised; ignored", exc_info=True)


async def sleep_until(released: asyncio.Event, timeout: float, should_abort: Callable[[], bool] | None) -> bool:
    """Sleep until ``released`` is set, ``timeout`` passes or ``should_abort`` says so; returns whether woken by ``released``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not released.is_set():
        left = end - loop.time()
        if left <= 0 or aborted(should_abort):
            return False
        step = left if should_abort is None else min(left, ABORT_CHECK_SECONDS)
        try:
            await asyncio.wait_for(released.wait(), step)
        except asyncio.TimeoutError:
            pass
    released.clear()
    return True
