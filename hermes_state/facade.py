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
from pathlib import Path
from typing import Any, ClassVar, Iterable, TypeVar

from .actor import WriterActor, WriterStoppedError
from .backend import Backend
from .commands.base import Command
from .config import default_db_path
from .errors import StoreClosedError, locked_error
from .limits import finite_arg, int64_arg

__all__ = ["StoreBase", "require_id", "opt_text", "flag_arg", "count_arg", "opt_number", "rows_size"]

log = logging.getLogger("hermes_state")
_S = TypeVar("_S", bound="StoreBase")

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
        self._loop: asyncio.AbstractEventLoop | None = None
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
        """The event loop the store is bound to (by its first awaited call), or None before that."""
        return self._loop

    async def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()
        loop = asyncio.get_running_loop()
        if self._opened:
            if loop is not self._loop:
                raise RuntimeError("this SessionDB was opened on another event loop; create one store per loop")
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._closed:
                raise StoreClosedError()
            if self._opened:
                return
            await self._backend.open()
            self._loop = loop
            if not self.read_only:
                self._actor.start()
            self._opened = True

    async def close(self) -> None:
        """Apply every queued write, then close all connections. Idempotent.

        Concurrent and repeated calls share one close. A caller cancelled
        while waiting still lets the close finish, then sees the cancellation.
        """
        if self._close_task is None:
            self._closed = True
            self._close_task = asyncio.get_running_loop().create_task(self._shutdown(), name="hermes-state-close")
        task = self._close_task
        cancelled = False
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError()
        task.result()

    async def _shutdown(self) -> None:
        try:
            try:
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
        await self._ensure_open()
        return await self._backend.storage_info()

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
        elif self._closed or not self._opened or loop is not self._loop:  # else already open here: no await
            await self._ensure_open()
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

    async def _remove_session_files(self, directory: Path | None, session_ids: Iterable[str]) -> None:
        """Best effort, off the event loop: drop transcript files a host kept beside the database."""
        ids = list(session_ids)
        if directory is not None and ids:
            await asyncio.to_thread(_unlink_session_files, Path(directory), ids)

    async def _query(self, name: str, *args: Any) -> Any:
        """Run the backend's read query ``name``; reads never enter the write queue."""
        await self._ensure_open()
        return await self._backend.reader.query(name, *args)


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
