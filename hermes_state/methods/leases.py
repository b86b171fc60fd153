"""Session turn leases: one agent turn per conversation at a time, across processes and hosts.

Upstream's four methods keep their contracts (``try_acquire_`` /
``acquire_`` / ``refresh_`` / ``release_session_turn_lease``; the
``turn_lease_holder`` parameter of transcript writes). On top of them:

- every acquisition draws a new **fencing token**; :meth:`session_turn` holds
  one and fences each write made through it by holder *and* token, checked
  inside the write's own transaction (on PostgreSQL under a lock on the
  lease row that a takeover must wait for);
- waiting does not poll the database in a loop: a release in this process
  wakes waiters at once (``lease_wakeups``), on PostgreSQL a release in any
  process does too (LISTEN/NOTIFY), and between wake-ups a waiter reads the
  lease row before it tries a write transaction;
- a holder is judged dead early only by the process it was recorded from
  (same host and PID namespace, pid and start time), never by a pid in the
  holder string; otherwise the TTL decides.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple

from ..commands.leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease, WithdrawTurnTicket
from ..errors import OperationalError, StoreClosedError, classify_persistence_error
from ..facade import DEFAULT_PATIENCE, StoreBase
from ..lease_host import own_process
from ..lease_wakeups import notify_release, release_waiter, wake_key
from ..limits import finite_arg
from ..session_turn import SessionTurn
from ..turn_fence import MAX_HOLDER_LENGTH, active_fence, holder_arg, session_arg, transcript_fence, ttl_arg
from ..turn_wait import aborted, could_acquire, first_in_line, notify_wait, sleep_until

__all__ = ["MAX_HOLDER_LENGTH", "TurnLeaseMethods", "active_fence", "holder_arg", "transcript_fence", "ttl_arg"]

log = logging.getLogger("hermes_state")

# A release that fails (a dropped connection, a locked file past its patience) is tried this
# many times, with these pauses between, before its error reaches the caller.
RELEASE_ATTEMPTS = 3
RELEASE_PAUSES = (0.05, 0.25)
# A waiter's place in the queue lasts this long unless renewed; a waiting caller renews it a
# third of the way, so a waiter that stalls or dies (on another host) holds the queue up that long at most.
WAITER_TTL_SECONDS = 15.0
# How long close() waits for turn-lease cleanups that callers on other event loops started there.
OTHER_LOOP_CLEANUP_SECONDS = 10.0


def _seconds_arg(value: Any, name: str) -> float:
    """A finite number of seconds (negative counts as 0)."""
    return max(0.0, finite_arg(value, name))


def _callable_arg(value: Any, name: str) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, not {type(value).__name__}")
    return value


class Acquired(NamedTuple):
    """A granted turn lease: its fencing token, the conversation it covers, how long the caller waited."""

    token: int | None
    conversation_id: str
    waited: float


class TurnLeaseMethods(StoreBase):
    """Durable turn leases keyed by conversation, with fencing tokens."""

    async def try_acquire_session_turn_lease(
        self, session_id: str, holder: str, *, ttl_seconds: float = 300.0, patience_s: float | None = None
    ) -> bool:
        """Take the conversation's turn lease for ``ttl_seconds``; returns whether ``holder`` owns it afterwards.

        The lease covers the session's whole conversation (any segment's id
        may be passed; an id with no session row yet keys itself). An expired
        lease is taken over, as is one whose recorded process, on this host,
        is gone. Already held by ``holder`` from this process: True, without
        extending it (use :meth:`refresh_session_turn_lease`). An empty id or
        holder returns False. ``patience_s`` bounds the wait for another
        process's write lock (default 20 s), then the locked error is raised.
        """
        sid, who = session_arg(session_id), holder_arg(holder)
        ttl = ttl_arg(ttl_seconds)
        patience = DEFAULT_PATIENCE if patience_s is None else _seconds_arg(patience_s, "patience_s")
        if sid is None or who is None:
            return False
        granted, _ = await self._acquire_turn(sid, who, ttl, patience, exclusive=False)
        return granted is not None

    async def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], Any] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], bool] | None = None,
        acquire_patience_s: float = 0.5,
    ) -> bool:
        """Wait up to ``wait_seconds`` for the conversation's turn lease; returns True once held, else False.

        ``should_abort`` is asked before every attempt and while waiting (a
        True ends the wait at once with False); cancelling the caller ends it
        with ``CancelledError``. ``on_wait(elapsed_seconds)`` is called after
        the first failed attempt and then once per
        ``wait_notice_interval_seconds`` (every poll when that is <= 0); it may
        be a plain function or a coroutine function, and what it raises is
        logged and ignored. A release wakes the waiter at once (on PostgreSQL
        also from another process); ``poll_interval_seconds`` is how often it
        looks otherwise (expiry, other hosts). ``wait_seconds=0`` makes one attempt.
        """
        sid, who = session_arg(session_id), holder_arg(holder)
        options = self._wait_options(
            ttl_seconds, wait_seconds, poll_interval_seconds, on_wait, wait_notice_interval_seconds, should_abort
        )
        patience = _seconds_arg(acquire_patience_s, "acquire_patience_s")
        if sid is None or who is None:
            return False
        return await self._wait_for_turn(sid, who, *options, patience=patience, exclusive=False) is not None

    async def refresh_session_turn_lease(self, session_id: str, holder: str, *, ttl_seconds: float = 300.0) -> bool:
        """Push the lease's expiry to now + ``ttl_seconds``; returns False unless ``holder`` owns the row.

        A lease that expired but was not taken over yet is revived. Empty
        arguments return False.
        """
        sid, who = session_arg(session_id), holder_arg(holder)
        ttl = ttl_arg(ttl_seconds)
        if sid is None or who is None:
            return False
        return bool(await self._write(RefreshTurnLease(session_id=sid, holder=who, ttl_seconds=ttl)))

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Drop the conversation's lease if ``holder`` owns it (anyone else's release is a no-op). Returns None.

        Waiters of the conversation wake at once. Empty arguments do nothing.
        """
        sid, who = session_arg(session_id), holder_arg(holder)
        if sid is None or who is None:
            return
        await self._release_turn(sid, who, None)

    def session_turn(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        refresh_interval_seconds: float | None = None,
        on_wait: Callable[[float], Any] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], bool] | None = None,
    ) -> SessionTurn:
        """Return an async context manager that holds the conversation's turn for the block.

        ``async with db.session_turn(session_id, holder, ttl_seconds=300) as turn:``
        waits for the lease like :meth:`acquire_session_turn_lease` (raising
        :class:`~hermes_state.SessionTurnTimeoutError` or
        :class:`~hermes_state.SessionTurnAbortedError` when it does not get
        it), refreshes it every ``refresh_interval_seconds`` (a third of the
        TTL by default) while the block runs, and releases it on exit, on
        error and on cancellation. ``turn.token`` is the fencing token;
        every write made through ``turn`` (``turn.append_message`` and the
        other transcript writes) is checked against holder and token in its
        own transaction and raises :class:`~hermes_state.SessionTurnLeaseLostError`
        once the lease was lost. Entering with an unknown session raises ``ValueError``.
        """
        sid, who = session_arg(session_id), holder_arg(holder)
        if sid is None:
            raise ValueError("session_id must be a non-empty string")
        if who is None:
            raise ValueError("holder must be a non-empty string")
        options = self._wait_options(
            ttl_seconds, wait_seconds, poll_interval_seconds, on_wait, wait_notice_interval_seconds, should_abort
        )
        refresh = None if refresh_interval_seconds is None else finite_arg(refresh_interval_seconds, "refresh_interval_seconds")
        if refresh is not None and refresh <= 0:
            raise ValueError("refresh_interval_seconds must be positive")
        return SessionTurn(self, sid, who, options, refresh)

    async def turn_leases(self) -> list[dict[str, Any]]:
        """Return every turn-lease row, oldest acquisition first.

        Each dict has ``conversation_id``, ``holder``, ``token``,
        ``acquired_at``, ``expires_at`` (epoch seconds), ``holder_host`` and
        ``holder_pid`` (who took it; None for rows written by upstream) and
        ``live`` (not yet expired by the backend's clock). An expired row stays
        until it is taken over, renewed by its holder or swept.
        """
        return list(await self._query("turn_leases"))

    # ------------------------------------------------------------ internals

    @staticmethod
    def _wait_options(
        ttl_seconds: Any, wait_seconds: Any, poll_interval_seconds: Any, on_wait: Any, notice: Any, should_abort: Any
    ) -> tuple[float, float, float, Callable[..., Any] | None, float, Callable[[], bool] | None]:
        return (
            ttl_arg(ttl_seconds),
            _seconds_arg(wait_seconds, "wait_seconds"),
            max(0.01, _seconds_arg(poll_interval_seconds, "poll_interval_seconds")),
            _callable_arg(on_wait, "on_wait"),
            finite_arg(notice, "wait_notice_interval_seconds"),
            _callable_arg(should_abort, "should_abort"),
        )

    def _lease_database(self) -> str:
        """What names this store's database in the process-wide wake-up registry."""
        return str(self._backend.lease_identity())  # type: ignore[attr-defined]

    async def _acquire_turn(
        self, session_id: str, holder: str, ttl: float, patience: float, *, exclusive: bool,
        ticket: int | None = None, queue: bool = False,
    ) -> tuple[Acquired | None, int | None]:
        """One acquire transaction; the grant (None when it is somebody else's turn) and the caller's ticket.

        With ``queue`` a caller that does not get the lease keeps its place
        in the queue (``ticket``), or joins it. Cancellation-safe: the
        transaction is shielded, and a caller cancelled while it is queued,
        running or just committed gets its ``CancelledError`` only after a
        lease it took was released again (by holder and token, so nobody
        else's) and a ticket it drew was withdrawn. A lease the holder
        already had before the call (a re-entrant acquire) is left alone.
        """
        host, pid, started = await own_process()
        command = AcquireTurnLease(
            session_id=session_id, holder=holder, ttl_seconds=ttl, host=host, pid=pid, started=started,
            exclusive=exclusive, ticket=ticket, queue=queue, queue_ttl_seconds=WAITER_TTL_SECONDS,
        )
        write = asyncio.ensure_future(self._write(command, patience=patience))
        try:
            acquired, token, conversation, _fresh, ticket = await asyncio.shield(write)
        except asyncio.CancelledError:
            await self._settle(self._undo_acquire(write, session_id, holder))
            raise
        return (Acquired(token, conversation, 0.0) if acquired else None), ticket

    async def _undo_acquire(self, write: asyncio.Future[Any], session_id: str, holder: str) -> None:
        """Release what the acquire ``write`` took (or leave the queue it joined) for a cancelled caller."""
        try:
            acquired, token, _conversation, fresh, ticket = await write
        except Exception:  # it failed: it took nothing
            return
        if acquired and fresh:
            await self._release_turn(session_id, holder, token)
        elif ticket is not None:
            await self._withdraw_ticket(ticket)

    async def _withdraw_ticket(self, ticket: int) -> None:
        """Leave the queue; the waiter now first (if the lease is free) is woken.

        A failure is logged, not raised: the ticket expires by itself within
        ``WAITER_TTL_SECONDS`` (at once for waiters of this host once this process is gone).
        """
        try:
            withdrawn, conversation = await self._write(
                WithdrawTurnTicket(ticket=ticket), during_close=self._closed and self._opened
            )
        except Exception as exc:
            log.warning("could not leave the turn-lease queue (ticket %s): %s; it expires by itself", ticket, exc)
            return
        if withdrawn:
            await self._announce_release(conversation)

    async def _settle(self, cleanup: Coroutine[Any, Any, None]) -> None:
        """Run ``cleanup`` to its end even if the caller is cancelled (again); ``close()`` waits for it."""
        task = asyncio.get_running_loop().create_task(cleanup, name="hermes-turn-cleanup")
        self._track(task, _cleanup_failed)
        await asyncio.shield(task)

    def _track(self, task: asyncio.Future[Any], failed: Callable[[BaseException], None]) -> None:
        """Let ``close()`` wait for ``task``; ``failed`` hears its exception, if it ends with one."""
        pending = self.__dict__.setdefault("_turn_cleanups", set())
        pending.add(task)

        def done(task: asyncio.Future[Any]) -> None:
            pending.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failed(task.exception())  # type: ignore[arg-type]

        task.add_done_callback(done)

    async def _before_close(self) -> None:
        pending = self.__dict__.get("_turn_cleanups")
        loop = asyncio.get_running_loop()
        while pending:  # a waiter whose set-up ended may start its cleanup meanwhile: until none is left
            tasks = [task for task in list(pending) if not task.done() and not task.get_loop().is_closed()]
            if not tasks:
                break
            await asyncio.gather(*[task for task in tasks if task.get_loop() is loop], return_exceptions=True)
            # A caller on another event loop started the others there: they end there. Bounded: that
            # loop's thread may itself be blocked on this close.
            give_up = loop.time() + OTHER_LOOP_CLEANUP_SECONDS
            for task in tasks:
                while task.get_loop() is not loop and not task.done() and not task.get_loop().is_closed():
                    if loop.time() >= give_up:
                        log.warning("closing while a turn-lease cleanup on another event loop still runs")
                        pending.discard(task)
                        break
                    await asyncio.sleep(0.005)
        await super()._before_close()

    async def _release_turn(self, session_id: str, holder: str, token: int | None) -> bool:
        """Drop the lease of ``holder`` (and ``token``); returns whether it was held. Wakes the waiters.

        Tried up to ``RELEASE_ATTEMPTS`` times; the last failure is raised.
        Runs also while the store closes (for cleanups started before).
        """
        command = ReleaseTurnLease(session_id=session_id, holder=holder, token=token)
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                released, conversation = await self._write(command, during_close=self._closed and self._opened)
                break
            except StoreClosedError:
                raise
            except Exception as exc:
                if attempt + 1 == RELEASE_ATTEMPTS:
                    raise
                log.warning("releasing the turn lease of %s failed (%s); trying again", session_id, exc)
                await asyncio.sleep(RELEASE_PAUSES[attempt])
        # After a failed attempt the release may have committed already: wake the waiters anyway.
        if released or attempt:
            await self._announce_release(conversation)
        return bool(released)

    async def _announce_release(self, conversation_id: str) -> None:
        """Wake the conversation's waiters in this process, and on SQLite those of other processes."""
        key = wake_key(conversation_id)
        notify_release(self._lease_database(), key)
        announce = getattr(self._backend, "announce_lease_release", None)
        if announce is not None:
            await announce(key)

    async def _wait_for_turn(
        self,
        session_id: str,
        holder: str,
        ttl: float,
        wait_seconds: float,
        poll: float,
        on_wait: Callable[..., Any] | None,
        notice: float,
        should_abort: Callable[[], bool] | None,
        *,
        patience: float,
        exclusive: bool,
    ) -> Acquired | None:
        """Acquire, waiting as :meth:`acquire_session_turn_lease` describes; None on timeout or abort.

        Each round first reads the lease row (no write transaction) and only
        tries to acquire when that could succeed. The first read names the
        conversation to register for wake-ups; a row it found held is read
        again once registered, so a release between the two is never missed.
        The listener for other processes' releases is set up beside the first
        rounds (a cold store queues in the order it asked) and awaited, with
        one more read, before the first sleep.
        """
        await self._ensure_open()
        watch = getattr(self._backend, "watch_lease_releases", None)
        watching: asyncio.Future[bool] | None = None
        if watch is not None and not self._backend.lease_releases_watched():  # type: ignore[attr-defined]
            # Set up beside the first look and the queue join, not before them: a cold store (a first
            # connection, ~10 ms; far more when many processes start at once) would otherwise join the
            # queue behind warm callers that asked later. Awaited before the first sleep, and the lease
            # looked at once more then, so a release from before it listened is not missed.
            watching = asyncio.ensure_future(self._at_home(watch))  # its connection lives on the home loop
            self._track(watching, _listen_failed)  # close() waits: nothing starts listening after it
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + wait_seconds
        last_notice: float | None = None
        first = True  # granted at the first look: the caller did not wait
        ticket: int | None = None  # our place in the conversation's queue, once we joined it
        renew_at = 0.0
        state: dict[str, Any] | None
        try:
            state = await self._query("turn_lease_state", session_id)
            with release_waiter(self._lease_database(), state["conversation_id"]) as released:
                if not await could_acquire(state, holder, exclusive):
                    state = await self._query("turn_lease_state", session_id)  # the look after registering
                while True:
                    if aborted(should_abort):
                        return None
                    # Write when the lease could be ours, to join the queue, or to renew our place in it.
                    joining = ticket is None and wait_seconds > 0
                    renewing = ticket is not None and loop.time() >= renew_at
                    if state is None or await could_acquire(state, holder, exclusive) or joining or renewing:
                        try:
                            granted, ticket = await self._acquire_turn(
                                session_id, holder, ttl, patience, exclusive=exclusive, ticket=ticket,
                                queue=wait_seconds > 0,
                            )
                        except OperationalError as exc:
                            if classify_persistence_error(exc) != "locked":
                                raise
                            granted = None  # another process kept the file locked past the patience: look again
                        if granted is not None:
                            return granted._replace(waited=0.0 if first else loop.time() - started)
                        renew_at = loop.time() + WAITER_TTL_SECONDS / 3
                    first = False
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return None
                    elapsed = loop.time() - started
                    if on_wait is not None and (last_notice is None or notice <= 0 or elapsed - last_notice >= notice):
                        last_notice = elapsed
                        await notify_wait(on_wait, elapsed)
                    if watching is not None:  # about to sleep for the first time: listen, then look again
                        await asyncio.shield(watching)
                        watching = None
                        state = await self._query("turn_lease_state", session_id, ticket)
                        continue
                    pause = min(poll, max(0.0, deadline - loop.time()))
                    if ticket is not None:
                        pause = min(pause, max(0.0, renew_at - loop.time()))
                    woken = await sleep_until(released, pause, should_abort)
                    if woken and ticket is not None and first_in_line(state):
                        state = None  # released, and nobody was ahead of us: try at once, skip the look
                    else:
                        state = await self._query("turn_lease_state", session_id, ticket)
        finally:
            if ticket is not None:  # timed out, aborted, failed or cancelled: leave the queue
                await self._settle(self._withdraw_ticket(ticket))


def _cleanup_failed(exc: BaseException) -> None:
    log.error("could not release a turn lease its cancelled caller took (it ends at its TTL): %s", exc)


def _listen_failed(exc: BaseException) -> None:
    log.debug("setting up the turn-lease release listener failed: %s", exc)
