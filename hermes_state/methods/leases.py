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
import contextvars
import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..commands.leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease, TurnFence
from ..errors import OperationalError, classify_persistence_error
from ..facade import DEFAULT_PATIENCE, StoreBase
from ..lease_host import own_process
from ..lease_wakeups import notify_release, release_waiter
from ..limits import finite_arg
from ..rules import turn_lease_takeover_on_loop

if TYPE_CHECKING:
    from ..session_turn import SessionTurn

__all__ = ["MAX_HOLDER_LENGTH", "TurnLeaseMethods", "active_fence", "holder_arg", "transcript_fence", "ttl_arg"]

log = logging.getLogger("hermes_state")

MAX_HOLDER_LENGTH = 1024
# The shortest lease upstream grants (a TTL of 0 is a 0.1 s lease).
MIN_TTL_SECONDS = 0.1
# How often a waiter with a ``should_abort`` callback asks it while it sleeps.
ABORT_CHECK_SECONDS = 0.05

# The fence of the session_turn whose method is running (set only around that call).
_ACTIVE_FENCE: contextvars.ContextVar[TurnFence | None] = contextvars.ContextVar("hermes_turn_fence", default=None)


def active_fence() -> contextvars.ContextVar[TurnFence | None]:
    """The context variable a :class:`~hermes_state.session_turn.SessionTurn` sets around its writes."""
    return _ACTIVE_FENCE


def holder_arg(value: Any, name: str = "holder") -> str | None:
    """A lease holder: None for None or "" (upstream answers those with False), else a str of at most 1,024 characters."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if len(value) > MAX_HOLDER_LENGTH:
        raise ValueError(f"{name} must be at most {MAX_HOLDER_LENGTH} characters, got {len(value)}")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def ttl_arg(value: Any, name: str = "ttl_seconds") -> float:
    """A finite, non-negative number of seconds, raised to upstream's floor of 0.1 s."""
    seconds = finite_arg(value, name)
    if seconds < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return max(MIN_TTL_SECONDS, seconds)


def _seconds_arg(value: Any, name: str) -> float:
    """A finite number of seconds (negative counts as 0)."""
    return max(0.0, finite_arg(value, name))


def _callable_arg(value: Any, name: str) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be callable or None, not {type(value).__name__}")
    return value


def _session_arg(value: Any) -> str | None:
    """A session id, None when empty (upstream answers an empty id with False)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"session_id must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ValueError("session_id must not contain NUL characters")
    return value


def transcript_fence(turn_lease_holder: Any, turn_lease_ttl_seconds: Any) -> TurnFence | None:
    """The fence of one transcript write: its ``turn_lease_holder``, or the :meth:`session_turn` it runs in.

    An empty holder means no fence (upstream's contract). Naming another
    holder than the session turn's own is a ``ValueError``.
    """
    active = _ACTIVE_FENCE.get()
    holder = holder_arg(turn_lease_holder, "turn_lease_holder")
    ttl = ttl_arg(turn_lease_ttl_seconds, "turn_lease_ttl_seconds")
    if holder is None:
        return active
    if active is not None:
        if active.holder != holder:
            raise ValueError("turn_lease_holder differs from the holder of the session_turn this write runs in")
        return active
    return TurnFence(holder=holder, ttl_seconds=ttl)


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
        sid, who = _session_arg(session_id), holder_arg(holder)
        ttl = ttl_arg(ttl_seconds)
        patience = DEFAULT_PATIENCE if patience_s is None else _seconds_arg(patience_s, "patience_s")
        if sid is None or who is None:
            return False
        granted = await self._acquire_turn(sid, who, ttl, patience, exclusive=False)
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
        sid, who = _session_arg(session_id), holder_arg(holder)
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
        sid, who = _session_arg(session_id), holder_arg(holder)
        ttl = ttl_arg(ttl_seconds)
        if sid is None or who is None:
            return False
        return bool(await self._write(RefreshTurnLease(session_id=sid, holder=who, ttl_seconds=ttl)))

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        """Drop the conversation's lease if ``holder`` owns it (anyone else's release is a no-op). Returns None.

        Waiters of the conversation wake at once. Empty arguments do nothing.
        """
        sid, who = _session_arg(session_id), holder_arg(holder)
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
        from ..session_turn import SessionTurn

        sid, who = _session_arg(session_id), holder_arg(holder)
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
        self, session_id: str, holder: str, ttl: float, patience: float, *, exclusive: bool
    ) -> Acquired | None:
        """One acquire transaction; the grant, or None when somebody else holds the lease."""
        host, pid, started = await own_process()
        command = AcquireTurnLease(
            session_id=session_id, holder=holder, ttl_seconds=ttl, host=host, pid=pid, started=started,
            exclusive=exclusive,
        )
        acquired, token, conversation = await self._write(command, patience=patience)
        return Acquired(token, conversation, 0.0) if acquired else None

    async def _release_turn(self, session_id: str, holder: str, token: int | None) -> bool:
        released, conversation = await self._write(ReleaseTurnLease(session_id=session_id, holder=holder, token=token))
        if released:
            notify_release(self._lease_database(), conversation)
        return bool(released)

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
        tries to acquire when that could succeed; the waiter is registered for
        release wake-ups before its first look, so no release is missed.
        """
        await self._ensure_open()
        watch = getattr(self._backend, "watch_lease_releases", None)
        if watch is not None:
            await self._at_home(watch)  # its connection lives on the store's home loop
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + wait_seconds
        last_notice: float | None = None
        first = True  # granted at the first look: the caller did not wait
        state = await self._query("turn_lease_state", session_id)
        with release_waiter(self._lease_database(), state["conversation_id"]) as released:
            while True:
                if _aborted(should_abort):
                    return None
                if await _could_acquire(state, holder, exclusive):
                    try:
                        granted = await self._acquire_turn(session_id, holder, ttl, patience, exclusive=exclusive)
                    except OperationalError as exc:
                        if classify_persistence_error(exc) != "locked":
                            raise
                        granted = None  # another process kept the file locked past the patience: look again
                    if granted is not None:
                        return granted._replace(waited=0.0 if first else loop.time() - started)
                first = False
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                elapsed = loop.time() - started
                if on_wait is not None and (last_notice is None or notice <= 0 or elapsed - last_notice >= notice):
                    last_notice = elapsed
                    await _notify_wait(on_wait, elapsed)
                await _sleep_until(released, min(poll, max(0.0, deadline - loop.time())), should_abort)
                state = await self._query("turn_lease_state", session_id)


async def _could_acquire(state: dict[str, Any], holder: str, exclusive: bool) -> bool:
    """Whether the lease row read by ``turn_lease_state`` would let ``holder`` acquire now."""
    if state["holder"] is None:
        return True
    verdict = await turn_lease_takeover_on_loop(
        holder, exclusive, state["holder"], state["expires_at"], state["holder_host"], state["holder_pid"],
        state["holder_started"], state["now"],
    )
    return verdict != "busy"


def _aborted(should_abort: Callable[[], bool] | None) -> bool:
    if should_abort is None:
        return False
    try:
        return bool(should_abort())
    except Exception:
        log.debug("should_abort raised; not aborting", exc_info=True)
        return False


async def _notify_wait(on_wait: Callable[..., Any], elapsed: float) -> None:
    try:
        result = on_wait(elapsed)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except Exception:
        log.debug("on_wait raised; ignored", exc_info=True)


async def _sleep_until(released: asyncio.Event, timeout: float, should_abort: Callable[[], bool] | None) -> None:
    """Sleep until ``released`` is set, ``timeout`` passes or ``should_abort`` says so."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not released.is_set():
        left = end - loop.time()
        if left <= 0 or _aborted(should_abort):
            return
        step = left if should_abort is None else min(left, ABORT_CHECK_SECONDS)
        try:
            await asyncio.wait_for(released.wait(), step)
        except asyncio.TimeoutError:
            pass
    released.clear()
