"""The plumbing every ``SessionDB`` method stands on: lifecycle, the write path, the read path.

``StoreBase`` owns the backend and the writer actor. Method groups
(``hermes_state.store`` and ``hermes_state.methods.*``) subclass it and only
validate, build commands and call ``_write`` or ``_query``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Iterable, TypeVar

from .actor import WriterActor, WriterStoppedError
from .backend import Backend
from .commands.base import Command
from .errors import EventLoopUnavailableError, StoreClosedError, locked_error
from .home_loop import LoopThread, hand_off, remember_own_loop
from .limits import finite_arg, int64_arg
from .off_loop import off_loop
from .paths import default_db_path

__all__ = ["StoreBase", "require_id", "opt_text", "flag_arg", "count_arg", "opt_number", "rows_size"]

log = logging.getLogger("hermes_state")
_S = TypeVar("_S", bound="StoreBase")
T = TypeVar("T")

# How long a loop the store moves away from may stay stopped (between the
# steps of ``asyncio.run``'s shutdown, say) with store calls still in flight
# before the move gives up with EventLoopUnavailableError.
STOPPED_LOOP_GRACE = 1.0
OWN_LOOP_THREAD = "hermes-state-store-loop"
STOPPED_LOOP_MESSAGE = (
    "this SessionDB's event loop stopped with a store call in flight and was not closed; "
    "run that loop until its calls finish, or close it, before using the store elsewhere"
)

# How long a write keeps retrying while another process holds the file lock.
DEFAULT_PATIENCE = 20.0
TRANSCRIPT_PATIENCE = 60.0
ACTIVITY_PATIENCE = 0.5


# DSN prefixes the SQLite store refuses, pointing at the PostgreSQL entry point instead.
POSTGRES_SCHEMES = ("postgresql://", "postgresql+", "postgres://")


def captured_home() -> Path | None:
    """The ``HERMES_HOME`` in effect now; a store reads that profile's config.yaml at first use."""
    return Path(os.environ["HERMES_HOME"]).expanduser() if os.environ.get("HERMES_HOME") else None


def require_id(value: Any, name: str = "session_id") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value or not value.strip():
        raise ValueError(f"{name} must be a non-empty string")
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name} must not contain lone surrogates (text that is not valid Unicode)") from None
    return value


def opt_text(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")


def flag_arg(value: Any, name: str) -> bool:
    """A boolean option: ``bool``, or the ints 0 and 1; anything else is a ``TypeError``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, not {type(value).__name__}")


def count_arg(value: Any, name: str) -> int:
    """An int in the signed 64-bit range (None counts as 0)."""
    return 0 if value is None else int64_arg(value, name)


def opt_number(value: Any, name: str) -> float | None:
    """None, or a finite number as a float (NaN, infinities and floats out of range are refused)."""
    return None if value is None else finite_arg(value, name)


def rows_size(rows: Iterable[Any]) -> int:
    total = 0
    for row in rows:
        content = row.content
        total += 64 + (len(content) if isinstance(content, (str, bytes)) else 0)
        for extra in (row.tool_calls, row.reasoning, row.reasoning_content, row.api_content):
            if extra:
                total += len(extra)
    return total



class _NeedOwnLoop(Exception):
    """Placing a call needs the store's own loop thread, which is started outside the bind lock."""


class StoreBase:
    """Lifecycle and plumbing shared by every method group of ``SessionDB``."""

    MAX_TITLE_LENGTH: ClassVar[int] = 100
    TITLE_SOURCE_DERIVED: ClassVar[str] = "derived"
    TITLE_SOURCE_LLM: ClassVar[str] = "llm"
    TITLE_SOURCE_USER: ClassVar[str] = "user"
    # Inspection tools set this on a subclass: a read-only store then reads an
    # idle WAL file without creating -wal/-shm files (SQLite ``immutable``).
    SNAPSHOT_READS: ClassVar[bool] = False

    def __init__(self, db_path: os.PathLike[str] | str | None = None, read_only: bool = False) -> None:
        self.read_only: bool = bool(read_only)
        self._accept_target(db_path)
        self._backend: Backend = self._make_backend()
        # A backend's optional ``start_batch`` saves the writer task's wake-ups per batch.
        self._actor = WriterActor(self._backend.apply_batch, start=getattr(self._backend, "start_batch", None))
        self._open_lock: asyncio.Lock | None = None
        self._opened = False
        # The home loop (see _home_for), the home once ready there (the fast
        # path's one comparison), the home the store moved away from until
        # its work there has ended, and the store's own loop thread, if any.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready_on: asyncio.AbstractEventLoop | None = None
        self._previous: asyncio.AbstractEventLoop | None = None
        self._preparing: asyncio.AbstractEventLoop | None = None
        self._own: LoopThread | None = None
        self._bind_lock = threading.Lock()
        self._inflight = 0  # calls doing I/O on the home loop now
        self._closed = False
        self._close_task: asyncio.Task[None] | None = None

    # The two hooks a backend's ``SessionDB`` subclass overrides (the default is SQLite).

    def _accept_target(self, db_path: os.PathLike[str] | str | None) -> None:
        """Validate the constructor's ``db_path`` (no I/O) and record it."""
        if isinstance(db_path, str) and db_path.startswith(POSTGRES_SCHEMES):
            raise ValueError(
                "this SessionDB stores to SQLite files; for a PostgreSQL DSN use "
                "`from hermes_state_postgres import SessionDB` (or hermes_state.postgres.SessionDB) "
                "with a postgresql+asyncpg:// URL"
            )
        self.db_path: Path = Path(db_path).expanduser() if db_path is not None else default_db_path()

    def _make_backend(self) -> Backend:
        from .sqlite.backend import SQLiteBackend

        return SQLiteBackend(self.db_path, read_only=self.read_only, home=captured_home(), snapshot=self.SNAPSHOT_READS)

    def _target_label(self) -> str:
        """What ``repr`` shows for the database (never a password)."""
        return str(self.db_path)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._opened else "unopened")
        return f"<{type(self).__name__} {self._target_label()!r} {state}{' read-only' if self.read_only else ''}>"

    async def __aenter__(self: _S) -> _S:
        await self._ensure_open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # --------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        """True once ``close()`` has been called."""
        return self._closed

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The store's home event loop: where its I/O runs now (None before the first awaited call).

        Calls from other loops are handed to it; it changes when the store
        moves (see :meth:`_home_for`).
        """
        return self._loop

    # The home-loop rule. The first awaited call's loop becomes the home. A call
    # from another loop L: when the home has closed, or stopped with nothing of
    # the store in flight, the store moves to L; when the home runs in another
    # thread, the store moves to a loop thread of its own, which every loop
    # (the old home's included) hands its calls to until close(). A move waits
    # for the calls still running on the old home, then rebinds what is
    # loop-bound (the writer's queue, the backend's connections and locks).

    def _home_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop | None:
        """Where a call from ``loop`` runs: None for ``loop`` itself (now the home), else the loop to hand it to."""
        while True:
            try:
                return self._place(loop)
            except _NeedOwnLoop:
                self._own_loop()  # a thread is started outside the bind lock, then the call is placed again

    def _place(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop | None:
        with self._bind_lock:
            home = self._loop
            own = self._own
            if home is loop:
                return None
            if home is None:
                self._loop = loop
                return None
            if own is not None and home is own.loop:
                return home  # the store's own loop stops only at close()
            if (own is not None and loop is own.loop) or home.is_closed() or not (home.is_running() or self._busy()):
                self._move_to(loop, home)  # the home closed, or stopped idle: the store moves here
                return None
            # The home runs in another thread (or stopped for a moment with calls in
            # flight, as between the steps of asyncio.run's shutdown): from now on
            # the store runs on a loop of its own, once those calls are over.
            if own is None:
                raise _NeedOwnLoop()
            self._move_to(own.loop, home)
            return own.loop

    def _move_to(self, loop: asyncio.AbstractEventLoop, previous: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ready_on = None
        self._previous = previous
        self._open_lock = None  # an asyncio.Lock serves one loop

    def _busy(self) -> bool:
        return bool(self._inflight) or self._preparing is not None or not self._actor.idle

    def _own_loop(self) -> asyncio.AbstractEventLoop:
        """The store's own loop thread's loop, started now if needed; the store moves there at its first call from it."""
        own = self._own
        if own is not None:
            return own.loop
        started = LoopThread(name=OWN_LOOP_THREAD)  # outside the lock: starting a thread waits for it
        with self._bind_lock:
            if self._own is None:
                self._own = started
                remember_own_loop(self)
                return started.loop
            own = self._own
        started.stop()  # another thread was first; the spare thread ends by itself
        return own.loop

    async def _enter(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop | None:
        """Make the store ready on ``loop``; returns None when the call runs here, else the loop to hand it to.

        A None answer is given in the same loop step as the caller's own
        ``_inflight`` count (no await between), so a move sees every call
        that runs on the old home.
        """
        while True:
            if self._closed:
                raise StoreClosedError()
            home = self._home_for(loop)
            if home is not None:
                return home
            if self._ready_on is loop:
                return None
            await self._get_ready(loop)

    async def _get_ready(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the store on ``loop``, its home, or move it in (after the old home's calls ended)."""
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._closed:
                raise StoreClosedError()
            if self._loop is not loop or self._ready_on is loop:
                return  # moved on meanwhile, or another caller got it ready
            await self._move_in(loop)
            self._preparing = loop
            try:
                if not self._opened:
                    await self._backend.open()
                    if not self.read_only:
                        self._actor.start()
                    self._opened = True
            finally:
                self._preparing = None
            with self._bind_lock:
                if self._loop is loop:
                    self._ready_on = loop

    async def _move_in(self, loop: asyncio.AbstractEventLoop) -> None:
        """Finish a move to ``loop``: wait out the old home's calls, then rebind what is loop-bound."""
        previous = self._previous
        if previous is None:
            return
        await self._wait_for_calls_on(previous, loop)
        if self._opened:
            dead = previous.is_closed()
            if not self.read_only:
                self._actor.rebind()
            rebind: Callable[[bool], Awaitable[None]] | None = getattr(self._backend, "rebind", None)
            if rebind is not None:
                await rebind(dead)
            self._after_move(dead)
        if self._previous is previous:
            self._previous = None

    async def _wait_for_calls_on(self, previous: asyncio.AbstractEventLoop, loop: asyncio.AbstractEventLoop) -> None:
        """Return once nothing of the store runs on ``previous`` any more (or it closed)."""
        # Once this callback ran there, every call on that loop that saw the old
        # home has counted itself (see _enter); later ones hand over.
        seen: list[bool] = []
        try:
            previous.call_soon_threadsafe(seen.append, True)
        except RuntimeError:  # closed meanwhile
            seen.append(True)
        if not previous.is_running():
            seen.append(True)  # nothing runs there: nobody is between a look and a count
        stopped_since: float | None = None
        while not previous.is_closed():
            if seen and self._inflight == 0 and self._preparing in (None, loop) and self._actor.idle:
                return
            if previous.is_running():
                stopped_since = None
            else:
                stopped_since = stopped_since or time.monotonic()
                if time.monotonic() - stopped_since > STOPPED_LOOP_GRACE:
                    raise EventLoopUnavailableError(STOPPED_LOOP_MESSAGE)
            await asyncio.sleep(0.002)
        self._inflight = 0  # the calls of a closed loop are gone with it
        self._preparing = None

    def _after_move(self, dead: bool) -> None:
        """Hook for method groups with loop-bound state of their own; ``dead``: the old home is closed.

        Overrides must call ``super()``.
        """

    async def _ensure_open(self) -> None:
        """Open the store on its home loop (this one, unless calls are handed elsewhere). Returns None."""
        home = await self._enter(asyncio.get_running_loop())
        if home is not None:
            await hand_off(home, self._ensure_open())

    async def _at_home(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)`` on the home loop, handed over from another loop if need be; returns its result."""
        home = await self._enter(asyncio.get_running_loop())
        if home is not None:
            return await hand_off(home, self._at_home(fn, *args))
        self._inflight += 1
        try:
            return await fn(*args)
        finally:
            self._inflight -= 1

    async def close(self) -> None:
        """Apply every queued write, then close all connections. Idempotent.

        Concurrent and repeated calls share one close. A caller cancelled
        while waiting still lets the close finish, then sees the cancellation.
        From another event loop the close runs on the store's home loop.
        """
        loop = asyncio.get_running_loop()
        task = self._close_task
        if task is not None and task.get_loop() is not loop:
            while not task.done() and not task.get_loop().is_closed():
                await asyncio.sleep(0.005)  # a close runs on another loop: it finishes there
            if task.done():
                return task.result()
        home = self._home_for(loop)
        if home is not None:
            await hand_off(home, self.close())
            return
        task = self._close_task
        if task is None or (task.get_loop() is not loop and not task.done()):  # a close begun on a loop now closed
            task = self._close_task = loop.create_task(self._shutdown(loop), name="hermes-state-close")
            self._closed = True
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        own = self._own
        if own is not None and loop is own.loop:
            # Closed: the store's own loop stops, a moment later, so that this
            # and every other handed-over close() still report back first.
            loop.call_later(0.05, own.stop)
        if cancelled:
            raise asyncio.CancelledError()
        task.result()

    async def _shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            try:
                if self._previous is not None:  # moved here and not yet moved in: do it under the open lock
                    if self._open_lock is None:
                        self._open_lock = asyncio.Lock()
                    async with self._open_lock:
                        await self._move_in(loop)
                await self._before_close()
            finally:
                await self._actor.stop()
        finally:
            await self._backend.close()

    async def _before_close(self) -> None:
        """Hook for method groups that buffer work (e.g. coalesced token counts).

        Runs at the start of ``close()``, before the write queue drains; the
        store already refuses new calls. Overrides must call ``super()``.
        """

    async def storage_info(self) -> dict[str, Any]:
        """Return facts about the open store: backend, driver, SQLite version, journal mode, schema version."""
        return await self._at_home(self._backend.storage_info)

    # ------------------------------------------------------------------ plumbing

    def _check_storable(self, command: Command) -> None:
        """Raise the backend's call-site refusal of a value it cannot store (PostgreSQL: NUL in text)."""
        refuse = getattr(self._backend, "command_refusal", None)
        problem = refuse(command) if refuse is not None else None
        if problem is not None:
            raise problem

    async def _write(
        self, command: Command, *, patience: float = DEFAULT_PATIENCE, size: int = 0, during_close: bool = False
    ) -> Any:
        """Queue ``command`` and return its result once committed, retrying lock contention.

        ``during_close`` lets a ``_before_close`` hook flush buffered work
        after the store started refusing new calls.
        """
        if self.read_only:
            raise self._backend.readonly_error()
        # A damaged file takes no more writes (backends without that check have no such method).
        refusal = getattr(self._backend, "write_refusal", lambda: None)()
        if refusal is not None:
            raise refusal
        self._check_storable(command)
        loop = asyncio.get_running_loop()
        if during_close:
            if not self._opened:
                raise StoreClosedError()
            home = self._loop
            if home is not None and home is not loop:  # a cleanup of a caller on another loop: the writer is home's
                if home.is_closed():
                    raise StoreClosedError()
                return await hand_off(home, self._write(command, patience=patience, size=size, during_close=True))
        elif self._closed or loop is not self._ready_on:  # else ready on this loop: no await
            home = await self._enter(loop)
            if home is not None:
                return await hand_off(home, self._write(command, patience=patience, size=size))
        self._inflight += 1  # in the same loop step as the look at _ready_on (see _enter)
        try:
            started = loop.time()
            while True:
                try:
                    return await self._actor.submit(command, size)
                except WriterStoppedError:
                    if self._closed:
                        raise StoreClosedError() from None
                    raise
                except Exception as exc:
                    if not self._backend.is_busy_error(exc):
                        raise
                    if loop.time() - started >= patience:
                        raise locked_error(patience, exc) from exc
                if self._closed and not during_close:
                    raise StoreClosedError()
                elapsed = loop.time() - started
                pause = random.uniform(0.02, 0.15) if elapsed < 2.0 else random.uniform(0.25, 1.0)
                await asyncio.sleep(max(0.0, min(pause, patience - elapsed)))
        finally:
            self._inflight -= 1

    async def _remove_session_files(self, directory: Path | None, session_ids: Iterable[str]) -> None:
        """Best effort, off the event loop: drop transcript files a host kept beside the database."""
        ids = list(session_ids)
        if directory is not None and ids:
            await off_loop(_unlink_session_files, Path(directory), ids)

    async def _query(self, name: str, *args: Any) -> Any:
        """Run the backend's read query ``name``; reads never enter the write queue."""
        loop = asyncio.get_running_loop()
        if self._closed or loop is not self._ready_on:
            home = await self._enter(loop)
            if home is not None:
                return await hand_off(home, self._query(name, *args))
        self._inflight += 1
        try:
            return await self._backend.reader.query(name, *args)
        finally:
            self._inflight -= 1


def _unlink_session_files(directory: Path, session_ids: Iterable[str]) -> None:
    """Best effort: drop transcript files a host kept beside the database."""
    for session_id in session_ids:
        candidates = [directory / f"{session_id}.json", directory / f"{session_id}.jsonl"]
        candidates.extend(directory.glob(f"request_dump_{session_id}_*.json"))
        for path in candidates:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.debug("could not remove %s: %s", path, exc)
