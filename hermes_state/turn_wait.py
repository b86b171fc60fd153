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

from .rules import turn_lease_takeover_on_loop, turn_waiter_alive_on_loop

__all__ = ["ABORT_CHECK_SECONDS", "aborted", "could_acquire", "notify_wait", "sleep_until"]

log = logging.getLogger("hermes_state")

# How often a waiter with a ``should_abort`` callback asks it while it sleeps.
ABORT_CHECK_SECONDS = 0.05


async def could_acquire(state: dict[str, Any], holder: str, exclusive: bool) -> bool:
    """Whether the lease row and queue read by ``turn_lease_state`` would let ``holder`` acquire now.

    A judgement that reads ``/proc`` (a local holder or waiter) runs on a worker thread.
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
    for w in state.get("ahead", ()):
        if await turn_waiter_alive_on_loop(float(w[0]), w[1], w[2], w[3], state["now"]):
            return False
    return True


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


async def sleep_until(released: asyncio.Event, timeout: float, should_abort: Callable[[], bool] | None) -> None:
    """Sleep until ``released`` is set, ``timeout`` passes or ``should_abort`` says so."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not released.is_set():
        left = end - loop.time()
        if left <= 0 or aborted(should_abort):
            return
        step = left if should_abort is None else min(left, ABORT_CHECK_SECONDS)
        try:
            await asyncio.wait_for(released.wait(), step)
        except asyncio.TimeoutError:
            pass
    released.clear()
