"""Exception types raised by the store, and helpers that classify failures.

Driver errors always reach callers as the standard library's ``sqlite3``
exception classes (even when the bundled ``pysqlite3`` driver is in use), so
``except sqlite3.IntegrityError`` keeps working in host code. The reference
raised those classes, so the PostgreSQL backend raises them too for the same
failures; the facade and ``methods/*`` import them from here, never a driver.
"""

from __future__ import annotations

import errno
import sqlite3
from typing import Literal

__all__ = [
    "DatabaseError",
    "OperationalError",
    "IntegrityError",
    "locked_error",
    "DatabaseUnavailableError",
    "StoreClosedError",
    "EventLoopUnavailableError",
    "SessionNotFoundError",
    "CompressionSessionClosedError",
    "CompressionSessionBusyError",
    "SessionCompressionInProgressError",
    "SessionTurnLeaseLostError",
    "SessionTurnTimeoutError",
    "SessionTurnAbortedError",
    "SessionResumeTooLargeError",
    "SessionExportTooLargeError",
    "WalUnsupportedError",
    "DatabaseMalformedError",
    "ConfigError",
    "SearchTimeoutError",
    "StatementTimeoutError",
    "LockTimeoutError",
    "WriteNotAppliedError",
    "PERSISTENCE_ERROR_CAUSES",
    "PersistenceErrorCause",
    "is_disk_full_error",
    "classify_persistence_error",
]

# What ``classify_persistence_error`` can answer, in the order its checks run.
PERSISTENCE_ERROR_CAUSES = ("locked", "compression", "compression_closed", "turn_lease", "corrupt", "disk", "unknown")
PersistenceErrorCause = Literal["locked", "compression", "compression_closed", "turn_lease", "corrupt", "disk", "unknown"]

CLOSED_MESSAGE = "SessionDB is closed"

# The database error classes of every backend (see the module docstring).
DatabaseError = sqlite3.Error
OperationalError = sqlite3.OperationalError
IntegrityError = sqlite3.IntegrityError


def locked_error(patience: float, cause: BaseException) -> OperationalError:
    """The error a write gets after waiting ``patience`` seconds on another process's lock."""
    err = OperationalError(
        f"database is locked (another Hermes process held the state.db write lock for over {patience:g}s — "
        "likely a long maintenance operation such as VACUUM, a large WAL checkpoint, or an older "
        "pre-update process; the database itself is healthy)"
    )
    err.__cause__ = cause
    return err


class DatabaseUnavailableError(ConnectionError):
    """The database server cannot be reached; the message names host and port, never a password."""


class StoreClosedError(RuntimeError):
    """Raised by every I/O method once ``close()`` has started."""

    def __init__(self, message: str = CLOSED_MESSAGE) -> None:
        super().__init__(message)


class EventLoopUnavailableError(RuntimeError):
    """A call came from a new event loop while the store's loop has work in flight and is not running.

    The store serves every event loop (see the README, "Event loops and
    threads"): it moves to the caller's loop when its own has closed or
    stopped with nothing in flight. A loop that stopped in the middle of a
    store call (and was not closed) holds that call's work, so the store can
    neither wait for it nor move: a call from elsewhere raises this once that
    loop has stayed stopped for a second. Run or close that loop first.
    """


class SessionNotFoundError(sqlite3.IntegrityError):
    """A write names a session that does not exist.

    Subclasses ``sqlite3.IntegrityError`` and keeps the SQLite wording
    ("FOREIGN KEY constraint failed") so callers of the reference store keep
    matching it, while naming the session that is missing.
    """

    def __init__(self, session_id: str, what: str = "session") -> None:
        self.session_id = session_id
        super().__init__(f"FOREIGN KEY constraint failed: {what} {session_id!r} does not exist")


class CompressionSessionBusyError(RuntimeError):
    """A compression lease is held by someone else, or was lost."""


class SessionCompressionInProgressError(CompressionSessionBusyError):
    """A compaction's compression lease was lost (``archive_and_compact(lock_holder=...)``).

    Never retried: a lost lease is permanent. Appends no longer meet this
    error; a compression lease does not hold them back.
    """

    def __init__(self, session_id: str, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message or f"Session '{session_id}' is being compressed by another writer")


class SessionTurnLeaseLostError(RuntimeError):
    """A fenced write's turn lease is gone: released, expired and taken over, or never held.

    Raised by a write made with ``turn_lease_holder`` (or through a
    :meth:`~hermes_state.SessionDB.session_turn` context) when the
    conversation's lease row is missing, names another holder, or carries
    another fencing token. Nothing of that call is stored.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"Session turn lease lost; refusing transcript write for '{session_id}'")


class SessionTurnTimeoutError(TimeoutError):
    """:meth:`~hermes_state.SessionDB.session_turn` waited ``wait_seconds`` and the lease stayed held."""

    def __init__(self, session_id: str, waited: float) -> None:
        self.session_id = session_id
        self.waited = waited
        super().__init__(f"session_turn_lease_timeout:{session_id} (waited {waited:.1f}s for another turn to end)")


class SessionTurnAbortedError(RuntimeError):
    """:meth:`~hermes_state.SessionDB.session_turn` stopped waiting because ``should_abort()`` said so."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"waiting for the turn lease of session '{session_id}' was aborted")


class CompressionSessionClosedError(RuntimeError):
    """The session was ended by compression; writes must go to its continuation."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"Session '{session_id}' is closed by compression; adopt its live "
            "continuation before appending messages"
        )


class _TranscriptTooLargeError(ValueError):
    """Base of the size guards: names the session, its active-row count and the limit."""

    purpose = "in-memory"

    def __init__(self, session_id: str, message_count: int, limit: int) -> None:
        self.session_id = session_id
        self.message_count = message_count
        self.limit = limit
        super().__init__(
            f"session '{session_id}' has at least {message_count} active messages; "
            f"safe {self.purpose} limit is {limit}"
        )


class SessionResumeTooLargeError(_TranscriptTooLargeError):
    """A session has more active messages than is safe to load for resume."""

    purpose = "resume"


class SessionExportTooLargeError(_TranscriptTooLargeError):
    """A session has more active messages than is safe to export in memory."""

    purpose = "in-memory export"


class WalUnsupportedError(sqlite3.OperationalError):
    """WAL was required but the file system or SQLite refused it."""


class DatabaseMalformedError(sqlite3.DatabaseError):
    """The database file has damaged pages outside the full-text indexes; the store stopped writing to it.

    Raised by the call that met the damage and, before anything is queued,
    by every later write of that store. ``path`` is the file and ``detail``
    SQLite's own message. The remedy the message names:
    ``repair_state_db_schema(path)`` (command line ``hermes-state doctor
    --repair``) with every store on the file closed; it keeps a backup copy
    and reports what it recovered.
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"{path} is damaged ({detail}); this store stopped writing to it. Close every store on the "
            f"file, then run hermes_state.repair_state_db_schema({path!r}) (command line: hermes-state "
            "doctor --repair); it keeps a backup copy and reports what it recovered"
        )


class ConfigError(ValueError):
    """``config.yaml`` holds a value the store cannot use; the message names the key."""


class SearchTimeoutError(TimeoutError):
    """``search_messages`` ran past ``sessions.search_timeout_ms``; the query was interrupted.

    Nothing stored is affected and the store stays usable; narrow the query
    or raise the limit in ``config.yaml``.
    """

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(
            f"search_messages took longer than sessions.search_timeout_ms={timeout_ms:g} ms "
            "and was interrupted; narrow the query or raise the limit"
        )


class FtsRepairNeeded(Exception):
    """Internal: a search met a corrupt full-text index.

    A backend's search raises it (only when asked to); the facade then
    rebuilds the index through the writer and searches again. Callers of
    the store never see it.
    """


class StatementTimeoutError(TimeoutError):
    """The server cancelled a statement that ran past its ``statement_timeout`` (PostgreSQL 57014).

    The statement's work is rolled back; the connection stays usable.
    """


class LockTimeoutError(TimeoutError):
    """A statement waited on a row or table lock past ``lock_timeout`` (PostgreSQL 55P03).

    Another connection held the lock; the statement's work is rolled back and
    the connection stays usable. Not retried: the limit is the caller's choice.
    """


class WriteNotAppliedError(ConnectionError):
    """The connection to the database was lost and the write is known NOT to have committed.

    The writer checked after reconnecting (and retried the batch once on a
    fresh connection); nothing of this call is stored, so it is safe to retry.
    """


_DISK_FULL_MARKERS = (
    "no space left on device",
    "not enough space",
    "database or disk is full",
    "disk full",
    "full disk",
    "enospc",
)


def is_disk_full_error(exc: BaseException | str | None) -> bool:
    """Return True when ``exc`` (or its cause chain), or a message string, reports a full disk."""
    if isinstance(exc, str):
        return any(marker in exc.lower() for marker in _DISK_FULL_MARKERS)
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        text = str(exc).lower()
        if any(marker in text for marker in _DISK_FULL_MARKERS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# Lower-cased message fragments, checked in this order after the exception classes.
_CAUSE_MARKERS: tuple[tuple[PersistenceErrorCause, tuple[str, ...]], ...] = (
    ("turn_lease", ("turn lease",)),
    ("compression_closed", ("closed by compression",)),
    ("compression", ("being compressed", "compression lease")),
    ("corrupt", ("malformed", "file is not a database", "not a database", "database corruption")),
    ("locked", ("locked", "busy")),
)


def classify_persistence_error(exc: BaseException | str | None) -> PersistenceErrorCause:
    """Return why a write failed: one of :data:`PERSISTENCE_ERROR_CAUSES`.

    ``exc`` is the exception, or its message as a string (then only the
    message rules below apply). The first match wins: None is ``"unknown"``; then the store's own
    classes (a lost turn lease, a session closed by compression, a busy or
    lost compression lease, a damaged file, a lock wait past
    ``lock_timeout``); then the message: "turn lease", "closed by
    compression", "being compressed"/"compression lease", corruption
    ("malformed", "not a database", ...), "locked"/"busy", and last a full
    disk or "disk"/"readonly"/"read-only" (so "database disk image is
    malformed" is ``"corrupt"``, not ``"disk"``). Anything else is ``"unknown"``.
    """
    if exc is None:
        return "unknown"
    if isinstance(exc, SessionTurnLeaseLostError):
        return "turn_lease"
    if isinstance(exc, CompressionSessionClosedError):
        return "compression_closed"
    if isinstance(exc, CompressionSessionBusyError):
        return "compression"
    if isinstance(exc, DatabaseMalformedError):
        return "corrupt"
    if isinstance(exc, LockTimeoutError):
        return "locked"
    text = str(exc).lower()
    for cause, markers in _CAUSE_MARKERS:
        if any(m in text for m in markers):
            return cause
    if is_disk_full_error(exc) or any(m in text for m in ("disk", "readonly", "read-only")):
        return "disk"
    return "unknown"
