"""The SQLite backend: one writer connection for the actor, a pool of query-only readers."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ..backend import Outcome, Report
from ..commands.base import Command
from ..config import StoreConfig, load_config
from ..errors import DatabaseMalformedError, StoreClosedError, locked_error
from ..off_loop import off_loop
from ..private_files import create_private_file
from .damage import damaged_tables, is_malformed_error, names_an_index
from .driver import (
    driver_module,
    driver_name,
    open_connection,
    post,
    run_on,
    sqlite_version_info,
    submit,
    to_stdlib_error,
)
from .journal import apply_database_pragmas, apply_journal_mode, read_journal_mode
from .lease_sockets import LeaseWakeSockets
from .queries import SEARCH_QUERIES, query_for
from .safety import preflight, record_init_error
from .schema import ensure_schema
from .search.cjk import cjk_fts_enabled, load_cjk_tokenizer
from .writer import apply_batch

__all__ = ["SQLiteBackend", "SQLiteReader"]

log = logging.getLogger("hermes_state.sqlite")
T = TypeVar("T")

WRITER_BUSY_TIMEOUT_MS = 1000
READER_BUSY_TIMEOUT_MS = 5000
# How long opening keeps retrying while another process holds the file's lock (a write's default patience).
OPEN_PATIENCE = 20.0


def _sidecars(path: Path) -> list[Path]:
    """The ``-wal`` and ``-shm`` files beside ``path`` that exist now."""
    return [side for side in (Path(f"{path}-wal"), Path(f"{path}-shm")) if side.exists()]


def _idle_wal_file(path: Path) -> bool:
    """True for a WAL-mode file without -wal/-shm beside it: nobody has it open, everything is checkpointed.

    Any open WAL connection keeps a -shm file, so its absence means an
    immutable read sees the whole database (a writer that starts during the
    read is the caller's risk; snapshot mode is for inspection tools).
    """
    if _sidecars(path):
        return False
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    # Bytes 18 and 19 of the header are the read/write format versions: 2 means WAL.
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def _tidy_sidecars(path: Path) -> None:
    """Let SQLite remove the -wal/-shm files a read-only store had to create, if no one else uses them.

    A read-only connection cannot take the exclusive lock that lets the last
    connection of a WAL file checkpoint and delete them, so they outlive it.
    Nothing to do when they are gone already. A short read through a
    read-write connection ends with SQLite's own
    close: when it is the last connection it checkpoints (nothing, unless
    another process wrote and left while the store was open: then the frames
    that process would have checkpointed itself) and deletes both files;
    when another connection is open it leaves them to that one. A file this
    user cannot write is opened read-only by SQLite and keeps them.
    """
    if not _sidecars(path):
        return
    conn = driver_module().connect(path.absolute().as_uri() + "?mode=rw", uri=True, isolation_level=None)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    finally:
        conn.close()


def _setup_writer(
    conn: Any, config: StoreConfig, label: str, home: Path | None = None, cjk_wanted: bool = True
) -> dict[str, Any]:
    mode = apply_journal_mode(conn, config.database.journal_mode, db_label=label)
    apply_database_pragmas(conn, config.database, busy_timeout_ms=WRITER_BUSY_TIMEOUT_MS)
    # Search: the optional CJK tokenizer must be loaded before the schema
    # step, which creates (or, when it is missing, detaches) the CJK index.
    cjk_loaded = load_cjk_tokenizer(conn, config=config, home=home, enabled=cjk_wanted)
    facts = ensure_schema(conn, cjk_loaded=cjk_loaded)
    facts["journal_mode"] = mode
    return facts


def _setup_reader(conn: Any, config: StoreConfig, cjk: bool = True, home: Path | None = None) -> dict[str, Any]:
    apply_database_pragmas(conn, config.database, busy_timeout_ms=READER_BUSY_TIMEOUT_MS)
    # Search: queries on the CJK index need the tokenizer on this connection too.
    if cjk:
        load_cjk_tokenizer(conn, config=config, home=home, enabled=True)
    conn.execute("PRAGMA query_only=ON")
    facts: dict[str, Any] = {"journal_mode": read_journal_mode(conn)}
    try:
        row = conn.execute("SELECT version FROM schema_version LIMIT 1").fetchone()
        facts["schema_version"] = None if row is None else int(row[0])
        fts = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
        facts["fts"] = "none" if fts is None else ("current" if "tool_name" in (fts[0] or "") else "legacy")
    except Exception as exc:  # not a hermes database (yet), unless the file is damaged
        if is_malformed_error(exc):
            raise
        raise sqlite3.OperationalError(f"not a hermes state database (open it writable once to create the schema): {exc}") from exc
    return facts


def _checkpoint(conn: Any) -> None:
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception:
        log.debug("checkpoint on close failed", exc_info=True)


# A cancelled read is aborted by SQLite's progress handler within this many
# virtual-machine steps, even between two statements of one query function
# (where ``interrupt()`` alone would be a no-op). Each call of the handler
# takes the GIL, which another thread may hold for up to the switch
# interval: every 1,000 steps that was 30-60 waits in one ordinary search.
PROGRESS_STEPS = 50_000


class _Read:
    """One read in flight; cancelling it aborts its statements on the connection.

    Its lane is released exactly once, when the connection thread is done
    with it: by the caller after its ``await`` returns, or, for a caller
    that was cancelled first, by whichever of the caller and the thread
    sees the other finish last (``finished`` and ``cancelled`` change under
    the lane's lock).
    """

    __slots__ = ("cancelled", "finished", "loop", "released", "search", "slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, search: bool, slots: asyncio.Semaphore | None) -> None:
        self.cancelled = False
        self.finished = False
        self.released = False
        self.loop = loop
        self.search = search
        self.slots = slots

    def progress(self) -> int:
        # SQLite's progress handler: a non-zero return aborts the statement.
        return 1 if self.cancelled else 0


class _Lane:
    """One query-only connection and what runs on it."""

    __slots__ = ("background", "busy", "conn", "lock", "reads", "running", "searches")

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self.background = False  # searches run here; its thread yields the CPU to the others
        self.busy = 0
        self.searches = 0
        self.reads: set[_Read] = set()
        self.running: _Read | None = None  # set on the connection thread
        self.lock = threading.Lock()  # pairs ``running`` with ``interrupt()``

    def _interrupt_connection(self) -> None:
        try:
            self.conn._conn.interrupt()  # thread-safe by SQLite's contract
        except Exception:  # already closed: nothing runs there any more
            log.debug("interrupt of a closed reader", exc_info=True)

    def cancel(self, read: _Read) -> bool:
        """Abort ``read``: at once if it is running, before its first statement if it is still queued.

        Returns True when the connection thread is already done with it
        (the caller releases it), False when the thread will release it.
        """
        with self.lock:
            read.cancelled = True
            if self.running is read:
                self._interrupt_connection()
            return read.finished

    def cancel_all(self) -> None:
        """Abort every read queued or running on this connection."""
        with self.lock:
            for read in self.reads:
                read.cancelled = True
            self._interrupt_connection()

    def release(self, read: _Read) -> None:
        """Give back what ``read`` took (on the event loop); later calls do nothing."""
        if read.released:
            return
        read.released = True
        self.busy -= 1
        self.searches -= read.search
        self.reads.discard(read)
        if read.slots is not None:
            read.slots.release()


# Nice increment of the threads of the search connections: a search that
# keeps a core busy (a huge row, a query matching half the store) then takes
# CPU time from the other readers and the event loop only when they idle.
SEARCH_THREAD_NICE = 5


def _yield_cpu(raw: Any) -> None:
    """Lower the calling connection thread's CPU priority (Linux: per thread; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + SEARCH_THREAD_NICE))
    except OSError:
        log.debug("could not lower the search thread's priority", exc_info=True)


def _guarded(raw: Any, lane: _Lane, read: _Read, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on the connection thread so that cancelling ``read`` stops it, then reset the connection."""
    try:
        with lane.lock:
            if read.cancelled:
                raise sqlite3.OperationalError("interrupted")
            lane.running = read
        raw.set_progress_handler(read.progress, PROGRESS_STEPS)
        try:
            return fn(raw, *args)
        finally:
            with lane.lock:
                lane.running = None
            raw.set_progress_handler(None, 0)
            if raw.in_transaction:  # an aborted read can leave its snapshot open
                try:
                    raw.execute("ROLLBACK")
                except Exception:
                    log.debug("rollback after an aborted read failed", exc_info=True)
    finally:
        with lane.lock:
            read.finished = True
            orphaned = read.cancelled
        if orphaned:  # its caller may be gone: free the lane from here
            try:
                read.loop.call_soon_threadsafe(lane.release, read)
            except RuntimeError:  # the loop is closed; so is the pool
                pass


class SQLiteReader:
    """Runs named read queries on the query-only connections, one thread hop per call.

    Pool policy: a plain read goes to the connection with no search running
    and the fewest calls in flight; searches run on at most
    ``read_connections - 1`` connections at a time (they wait for a slot),
    so with two or more connections a plain read never queues behind a
    search. A read whose caller is cancelled is interrupted on its
    connection (``Connection.interrupt`` plus a progress handler), which is
    usable again as soon as the aborted statement returns; ``close()``
    interrupts every running read.
    """

    def __init__(self, backend: SQLiteBackend) -> None:
        self._backend = backend

    async def run(self, fn: Callable[..., T], *args: Any, search: bool = False) -> T:
        """Run ``fn(raw_connection, *args)`` on a reader thread chosen by the pool policy; returns its result."""
        backend = self._backend
        if not backend._lanes:
            raise StoreClosedError()
        slots = backend._search_slots if search else None
        if slots is not None:
            await slots.acquire()
        lanes = backend._lanes
        if not lanes:
            if slots is not None:
                slots.release()
            raise StoreClosedError()
        if search:
            lane = min((item for item in lanes if item.background or len(lanes) == 1), key=lambda item: (item.searches, item.busy))
        else:
            lane = min(lanes, key=lambda item: (item.searches, item.busy, item.background))
        read = _Read(asyncio.get_running_loop(), search, slots)
        lane.busy += 1
        lane.searches += search
        lane.reads.add(read)
        try:
            work = submit(lane.conn, _guarded, lane, read, fn, *args)
        except ValueError:  # the connection closed under us
            lane.release(read)
            raise StoreClosedError() from None
        # The thread's own future, awaited directly: a shield and a done
        # callback would each cost the event loop another pass per read.
        try:
            result = await work
        except asyncio.CancelledError:
            if lane.cancel(read):
                lane.release(read)
            raise
        except Exception as exc:
            lane.release(read)
            if read.cancelled and not backend._lanes:
                raise StoreClosedError() from None
            converted = to_stdlib_error(exc)
            if is_malformed_error(converted):
                raise await backend.explain_damage(lane.conn, converted) from exc
            if converted is exc:
                raise
            raise converted from None
        lane.release(read)
        return result

    async def query(self, name: str, *args: Any) -> Any:
        """Run the registered query ``name`` with ``args``; returns what it returns."""
        return await self.run(query_for(name), *args, search=name in SEARCH_QUERIES)


class SQLiteBackend:
    """Owns the connections to one SQLite file."""

    def __init__(self, path: Path, *, read_only: bool, home: Path | None = None, snapshot: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        # Read-only inspection of a WAL file no process has open: read it as
        # immutable so no -wal/-shm files are created and no write permission
        # is needed (see _prepare_files).
        self.snapshot = snapshot and read_only
        # A read-only store that finds no -wal/-shm files leaves none behind (see close()).
        self._tidy_on_close = False
        self.home = home
        self.config = StoreConfig()
        self.reader = SQLiteReader(self)
        self._writer_conn: aiosqlite.Connection | None = None
        self._lanes: list[_Lane] = []
        self._search_slots: asyncio.Semaphore | None = None
        self._facts: dict[str, Any] = {}
        # Set by the first error that shows damaged pages outside the FTS
        # indexes; from then on this store refuses every write.
        self.damaged: DatabaseMalformedError | None = None
        self._shut = False  # close() was called: no more open attempts
        self._identity: str | None = None  # the file's real path, see lease_identity()

    async def open(self) -> None:
        """Open the connections and bring the schema up to date.

        While another process holds the file's lock (the schema step writes),
        the whole open is retried with a short random pause for up to
        ``OPEN_PATIENCE`` seconds, then fails with the documented "database
        is locked (...)" error; the next call tries again. ``close()`` stops
        the retries.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OPEN_PATIENCE
        while True:
            try:
                await self._open_once()
                return
            except Exception as exc:
                if not self.is_busy_error(exc) or self._shut:
                    raise
                if loop.time() >= deadline:
                    raise locked_error(OPEN_PATIENCE, exc) from exc
            await asyncio.sleep(random.uniform(0.02, 0.15))
            if self._shut:
                raise StoreClosedError()

    async def _open_once(self) -> None:
        # Every file-system step of an open (config.yaml, directories, modes,
        # the zeroed-file probe) runs on a worker thread, never on the loop.
        self.config = await off_loop(load_config, self.home)
        # Resolved here, on the opening task: a turn's bound session settings are not visible on the connection threads.
        cjk_wanted = cjk_fts_enabled(self.config)
        try:
            uri = await off_loop(self._prepare_files)
            if not self.read_only:
                self._writer_conn = await open_connection(str(self.path), timeout=WRITER_BUSY_TIMEOUT_MS / 1000)
                self._facts = await run_on(
                    self._writer_conn, _setup_writer, self.config, self.path.name, self.home, cjk_wanted
                )
            # Read-only stores have no writer; otherwise the readers follow the writer.
            cjk = cjk_wanted and (self.read_only or bool(self._facts.get("cjk")))
            for _ in range(self.config.database.read_connections):
                reader = await open_connection(uri, uri=True, timeout=READER_BUSY_TIMEOUT_MS / 1000)
                self._lanes.append(_Lane(reader))
                facts = await run_on(reader, _setup_reader, self.config, cjk, self.home)
                for key, value in facts.items():
                    self._facts.setdefault(key, value)
            if uri.endswith("&immutable=1"):
                self._facts["journal_mode"] = "wal"  # an immutable read reports the default, not the file's mode
            # Searches run on every connection but the first (when there are two
            # or more), one at a time each, at a lower CPU priority.
            for lane in self._lanes[1:]:
                lane.background = True
                await run_on(lane.conn, _yield_cpu)
            self._search_slots = asyncio.Semaphore(max(1, len(self._lanes) - 1))
        except BaseException as exc:
            record_init_error(f"{type(exc).__name__}: {exc}")
            await self._release()
            if isinstance(exc, Exception) and is_malformed_error(exc):
                raise DatabaseMalformedError(str(self.path), str(exc)) from exc
            raise

    async def rebind(self, dead: bool) -> None:
        """Serve the event loop the store moved to; returns None.

        The connections run on threads of their own and stay; the search
        slots (an asyncio semaphore) are made anew. After a closed loop
        (``dead``) the reads it abandoned no longer count against their lanes.
        """
        if dead:
            for lane in self._lanes:
                lane.busy = lane.searches = 0
                lane.reads.clear()
        if self._lanes:
            self._search_slots = asyncio.Semaphore(max(1, len(self._lanes) - 1))

    def _prepare_files(self) -> str:
        """The file-system part of an open (on a worker thread); returns the readers' URI.

        A writable store creates the directory and the file (0600, not
        SQLite's umask mode; its -wal/-shm files take the same mode) after
        the preflight checks; a read-only one only checks that the file is there.
        """
        if not self.read_only:
            preflight(self.path)
            create_private_file(self.path)
        elif self.path.is_dir():
            raise sqlite3.OperationalError(f"unable to open database file: {self.path} is a directory")
        elif not self.path.exists():
            raise sqlite3.OperationalError(f"unable to open database file: {self.path} does not exist")
        self._identity = os.path.realpath(self.path)
        uri = self.path.absolute().as_uri() + "?mode=ro"
        immutable = self.snapshot and _idle_wal_file(self.path)
        self._tidy_on_close = self.read_only and not immutable and not _sidecars(self.path)
        return uri + "&immutable=1" if immutable else uri

    def lease_identity(self) -> str:
        """The file, as every store in this process on it names it for turn-lease wake-ups.

        Its real path, resolved on a worker thread when the store opened (the
        lease methods run on an open store); before that, the path as given.
        """
        return self._identity or str(self.path)

    def _wake_sockets(self) -> LeaseWakeSockets:
        wake = self.__dict__.get("_wake")
        if wake is None:
            wake = self.__dict__["_wake"] = LeaseWakeSockets(self.path, self.lease_identity())
        return wake

    async def watch_lease_releases(self) -> bool:
        """Listen for turn-lease releases of other processes on this host (once); returns whether it does."""
        return await self._wake_sockets().ensure()

    def lease_releases_watched(self) -> bool:
        """Whether this store's wake-up socket is bound now (no I/O)."""
        wake = self.__dict__.get("_wake")
        return wake is not None and wake.listening

    async def announce_lease_release(self, key: str) -> None:
        """Wake the waiters of other processes on this host for the conversation whose wake key is ``key``."""
        await self._wake_sockets().announce(key)

    def write_refusal(self) -> Exception | None:
        """The error every write raises before it is queued, once the file is known to be damaged."""
        if self.damaged is None:
            return None
        return DatabaseMalformedError(self.damaged.path, self.damaged.detail)

    def _mark_damaged(self, exc: BaseException) -> DatabaseMalformedError:
        if self.damaged is None:
            self.damaged = DatabaseMalformedError(str(self.path), str(exc))
            log.error("%s", self.damaged)
        error = DatabaseMalformedError(str(self.path), str(exc))
        error.__cause__ = exc
        return error

    async def explain_damage(self, conn: aiosqlite.Connection, exc: BaseException) -> sqlite3.DatabaseError:
        """The error a read that met corruption raises: file damage stops writes, index damage says so."""
        if self.damaged is not None:
            return self._mark_damaged(exc)
        if names_an_index(exc):
            tables = []  # the error itself places the damage in an index: no scan needed
        else:
            try:
                tables = await run_on(conn, damaged_tables)
            except Exception:  # the check itself could not run: treat the file as damaged
                tables = ["sqlite_master"]
        if tables:
            return self._mark_damaged(exc)
        return sqlite3.DatabaseError(
            f"the full-text index is corrupt ({exc}); a writable store rebuilds it on its next search or open"
        )

    async def apply_batch(self, commands: Sequence[Command]) -> list[Outcome]:
        conn = self._writable()
        try:
            outcomes = await run_on(conn, apply_batch, commands)
        except Exception as exc:
            if is_malformed_error(exc):
                raise self._mark_damaged(exc) from exc
            raise
        return self._placed(outcomes)

    def start_batch(self, commands: Sequence[Command], report: Report) -> None:
        """Apply the batch in one hop onto the writer thread; ``report`` runs on the loop when it is done.

        The same work as :meth:`apply_batch` (the actor uses this one): the
        thread applies and commits the batch and builds the outcomes, then
        calls back onto the event loop once.
        """
        conn = self._writable()

        def finished(outcomes: list[Outcome] | None, error: BaseException | None) -> None:
            if error is not None or outcomes is None:
                failure = error if error is not None else RuntimeError("the batch returned no outcomes")
                report(None, self._batch_error(failure) if isinstance(failure, Exception) else failure)
            else:
                report(self._placed(outcomes), None)

        try:
            post(conn, apply_batch, (commands,), finished)
        except ValueError:  # the connection closed under us
            raise StoreClosedError() from None

    def _writable(self) -> aiosqlite.Connection:
        if self._writer_conn is None:
            raise StoreClosedError()
        refusal = self.write_refusal()
        if refusal is not None:
            raise refusal
        return self._writer_conn

    def _batch_error(self, exc: Exception) -> Exception:
        return self._mark_damaged(exc) if is_malformed_error(exc) else exc

    def _placed(self, outcomes: list[Outcome]) -> list[Outcome]:
        # FTS damage was recovered from inside the batch; what still says
        # "malformed" lies in the transcript tables.
        return [
            (False, self._mark_damaged(value)) if not ok and is_malformed_error(value) else (ok, value)
            for ok, value in outcomes
        ]

    def is_busy_error(self, exc: BaseException) -> bool:
        if not isinstance(exc, sqlite3.OperationalError):
            return False
        text = str(exc).lower()
        return "locked" in text or "busy" in text

    def readonly_error(self) -> Exception:
        return sqlite3.OperationalError("attempt to write a readonly database")

    async def storage_info(self) -> dict[str, Any]:
        return {
            "backend": "sqlite",
            "path": str(self.path),
            "driver": driver_name(),
            "sqlite_version": ".".join(map(str, sqlite_version_info())),
            "journal_mode": self._facts.get("journal_mode"),
            "schema_version": self._facts.get("schema_version"),
            "fts": self._facts.get("fts"),
            "read_only": self.read_only,
        }

    async def close(self) -> None:
        self._shut = True
        wake = self.__dict__.get("_wake")
        if wake is not None:
            await wake.close()
        await self._release()

    async def _release(self) -> None:
        """Close every connection (the store may open again, unless ``close()`` was called)."""
        lanes, self._lanes = self._lanes, []
        writer, self._writer_conn = self._writer_conn, None
        # Running reads are interrupted, not waited for: their callers get StoreClosedError.
        for lane in lanes:
            lane.cancel_all()
        for lane in lanes:
            await lane.conn.close()
        if writer is not None:
            # A damaged file gets no checkpoint either: the WAL stays beside it for the repair.
            if self._facts.get("journal_mode") == "wal" and self.damaged is None:
                try:
                    await run_on(writer, _checkpoint)
                except Exception:
                    log.debug("checkpoint failed", exc_info=True)
            await writer.close()
        if self._tidy_on_close:
            self._tidy_on_close = False
            try:
                await off_loop(_tidy_sidecars, self.path)
            except Exception:  # best effort: the files are SQLite's to clean up on a later open
                log.debug("could not remove the -wal/-shm files of %s", self.path, exc_info=True)
