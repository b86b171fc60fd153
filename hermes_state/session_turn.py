"""``SessionTurn``: a held turn lease as an async context manager (see ``SessionDB.session_turn``).

Entering waits for the conversation's lease (a new fencing token each time),
a background task keeps it refreshed, and leaving releases it, also after an
error or a cancellation. The transcript writes offered here run with the
turn's fence (holder and token), set in a context variable around each call
only, so a plain ``db.append_message`` inside the block is not fenced by
accident and a task started from the block does not inherit the fence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .commands.leases import RefreshTurnLease, TurnFence
from .errors import SessionTurnAbortedError, SessionTurnLeaseLostError, SessionTurnTimeoutError
from .turn_fence import active_fence
from .turn_wait import aborted

__all__ = ["SessionTurn"]

log = logging.getLogger("hermes_state")

T = TypeVar("T")
WaitOptions = tuple[float, float, float, Callable[..., Any] | None, float, Callable[[], bool] | None]


class SessionTurn:
    """The turn lease of one conversation, held for an ``async with`` block.

    After entering: ``token`` is the fencing token (it only grows from one
    acquisition of the store's leases to the next), ``conversation_id`` the
    conversation the lease covers, ``waited`` the seconds spent waiting for
    another turn to end (reload the transcript when it is above 0: that turn
    may have appended). ``lost`` turns True once a refresh finds the lease
    gone; every fenced write raises :class:`SessionTurnLeaseLostError` then.
    """

    def __init__(
        self, db: Any, session_id: str, holder: str, options: WaitOptions, refresh_interval: float | None
    ) -> None:
        self._db = db
        self.session_id = session_id
        self.holder = holder
        self._options = options
        self.ttl_seconds = options[0]
        self.refresh_interval = refresh_interval if refresh_interval is not None else max(0.05, self.ttl_seconds / 3)
        self.token: int | None = None
        self.conversation_id: str | None = None
        self.waited = 0.0
        self._lost = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        self._held = False
        self._fence: TurnFence | None = None

    def __repr__(self) -> str:
        state = "lost" if self.lost else ("held" if self._held else "not held")
        return f"<SessionTurn {self.session_id!r} holder={self.holder!r} token={self.token} {state}>"

    @property
    def lost(self) -> bool:
        """True once the lease was found taken over, released or swept."""
        return self._lost.is_set()

    async def wait_lost(self) -> None:
        """Return when the lease is lost (never, while it stays held): race it against the turn's work."""
        await self._lost.wait()

    def check(self) -> None:
        """Raise :class:`SessionTurnLeaseLostError` if the lease is lost; returns None otherwise."""
        if self.lost or not self._held:
            raise SessionTurnLeaseLostError(self.session_id)

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> SessionTurn:
        if self._held:
            raise RuntimeError("this session_turn is already entered; ask db.session_turn(...) for another")
        if await self._db.get_session(self.session_id) is None:  # type: ignore[attr-defined]
            raise ValueError(f"session_id {self.session_id!r} does not exist")
        should_abort = self._options[5]
        granted = await self._db._wait_for_turn(
            self.session_id, self.holder, *self._options, patience=0.5, exclusive=True
        )
        if granted is None:
            if aborted(should_abort):
                raise SessionTurnAbortedError(self.session_id)
            raise SessionTurnTimeoutError(self.session_id, self._options[1])
        self.token, self.conversation_id, self.waited = granted
        self._fence = TurnFence(holder=self.holder, token=self.token, ttl_seconds=self.ttl_seconds)
        self._held = True
        self._refresher = asyncio.get_running_loop().create_task(self._keep_fresh(), name="hermes-turn-refresh")
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.cancel()
        if not self._held:
            return
        self._held = False
        # Shielded: a cancelled turn still releases (the wait for it is what gets cancelled).
        release = asyncio.ensure_future(self._db._release_turn(self.session_id, self.holder, self.token))
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            if not release.done():
                release.add_done_callback(_log_release_error)
            raise
        except Exception as failure:  # retried already: the caller must know the lease outlives the turn
            log.error("could not release the turn lease of %s: %s", self.session_id, failure)
            if exc is None:
                raise
            note = getattr(exc, "add_note", None)  # Python 3.11+; 3.10 has the log line alone
            if note is not None:
                note(f"releasing the turn lease of {self.session_id!r} failed as well: {failure!r}")

    async def _keep_fresh(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            command = RefreshTurnLease(
                session_id=self.session_id, holder=self.holder, ttl_seconds=self.ttl_seconds, token=self.token
            )
            try:
                kept = await self._db._write(command)  # type: ignore[attr-defined]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # transient: the next round tries again; a takeover shows as False
                log.warning("refreshing the turn lease of %s failed: %s", self.session_id, exc)
                continue
            if not kept:
                log.warning("the turn lease of %s (token %s) was lost", self.session_id, self.token)
                self._lost.set()
                return

    async def refresh(self) -> bool:
        """Push the lease's expiry to now + the TTL at once; returns False (and marks the turn lost) when it is gone."""
        self.check()
        command = RefreshTurnLease(
            session_id=self.session_id, holder=self.holder, ttl_seconds=self.ttl_seconds, token=self.token
        )
        kept = bool(await self._db._write(command))  # type: ignore[attr-defined]
        if not kept:
            self._lost.set()
        return kept

    # ------------------------------------------------------------ fenced writes

    async def _run(self, call: Callable[[], Awaitable[T]]) -> T:
        self.check()
        var = active_fence()
        reset = var.set(self._fence)
        try:
            return await call()
        except SessionTurnLeaseLostError:
            self._lost.set()
            raise
        finally:
            var.reset(reset)

    async def append_message(self, *args: Any, **kwargs: Any) -> int:
        """``SessionDB.append_message`` fenced by this turn; returns the new row id."""
        return await self._run(lambda: self._db.append_message(*args, **kwargs))  # type: ignore[attr-defined]

    async def append_messages_batch(self, *args: Any, **kwargs: Any) -> int:
        """``SessionDB.append_messages_batch`` fenced by this turn (one transaction); returns the rows written."""
        return await self._run(lambda: self._db.append_messages_batch(*args, **kwargs))  # type: ignore[attr-defined]

    async def replace_messages(self, *args: Any, **kwargs: Any) -> None:
        """``SessionDB.replace_messages`` fenced by this turn. Returns None."""
        return await self._run(lambda: self._db.replace_messages(*args, **kwargs))  # type: ignore[attr-defined]

    async def pop_message(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """``SessionDB.pop_message`` fenced by this turn; returns the removed row, or None."""
        return await self._run(lambda: self._db.pop_message(*args, **kwargs))  # type: ignore[attr-defined]

    async def rewind_to_message(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``SessionDB.rewind_to_message`` fenced by this turn; returns what it returns."""
        return await self._run(lambda: self._db.rewind_to_message(*args, **kwargs))  # type: ignore[attr-defined]

    async def archive_and_compact(self, *args: Any, **kwargs: Any) -> int:
        """``SessionDB.archive_and_compact`` fenced by this turn; returns the rows inserted."""
        return await self._run(lambda: self._db.archive_and_compact(*args, **kwargs))  # type: ignore[attr-defined]

    async def publish_compression_child(self, **kwargs: Any) -> None:
        """``SessionDB.publish_compression_child`` fenced by this turn (the parent's conversation). Returns None."""
        return await self._run(lambda: self._db.publish_compression_child(**kwargs))  # type: ignore[attr-defined]


def _log_release_error(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("releasing a turn lease failed: %s", task.exception())
