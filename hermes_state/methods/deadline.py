"""A per-call deadline as one loop timer that cancels the calling task.

``asyncio.wait_for`` wraps the awaited coroutine in a new task (and, around
a shielded read, more futures and callbacks): on a search of a tenth of a
millisecond that bookkeeping costs as much as the statement. One
``loop.call_at`` handle does the same job: when it fires it cancels the
task, and the read under it interrupts its statement on the way out (see
``SQLiteReader.run``). ``asyncio.timeout`` would do this too, but the
package supports Python 3.10.
"""

from __future__ import annotations

import asyncio

__all__ = ["Deadline"]


class Deadline:
    """Cancel the current task ``seconds`` from now unless :meth:`expired` is asked first.

    Usage::

        deadline = Deadline(seconds)
        try:
            result = await work()
        except asyncio.CancelledError:
            if deadline.expired():
                raise SomeTimeoutError from None
            raise
        finally:
            deadline.cancel()
    """

    __slots__ = ("_cancelling", "_fired", "_handle", "_task")

    def __init__(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._fired = False
        cancelling = getattr(self._task, "cancelling", None)  # Python 3.11+
        self._cancelling = cancelling() if cancelling is not None else 0
        self._handle = loop.call_at(loop.time() + seconds, self._fire) if self._task is not None else None

    def _fire(self) -> None:
        self._fired = True
        assert self._task is not None
        self._task.cancel()

    def cancel(self) -> None:
        """Disarm the timer (the work finished, or failed for another reason)."""
        if self._handle is not None:
            self._handle.cancel()

    def expired(self) -> bool:
        """True when the CancelledError being handled is this deadline's own.

        On Python 3.11+ a cancellation from anyone else as well (the caller
        cancelled too) keeps the error a CancelledError, as in
        ``asyncio.timeout``.
        """
        if not self._fired:
            return False
        uncancel = getattr(self._task, "uncancel", None)
        return uncancel is None or uncancel() <= self._cancelling
