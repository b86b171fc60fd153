"""Open-time safety and repair: the preflight checks, zeroed files moved aside, damaged files repaired.

A crash during a file-system level copy or a bad restore can leave a file of
the right size full of NUL bytes. SQLite reports such a file as "not a
database" forever; moving it (and its sidecars) aside lets a fresh database
be created while keeping the bytes for inspection.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from .repair_files import (
    clear_ledger,
    fingerprint,
    forensic_backup,
    ledger_path,
    record_failed_repair,
    refusal,
    set_aside,
)

from ..private_files import create_private_file, make_private_dirs, move_private

# Synchronous: they run on worker threads (hermes_state.compat holds the
# public coroutines of the same names) and in the hermes-state command.
__all__ = [
    "is_zeroed_file",
    "quarantine_zeroed_file",
    "get_last_init_error",
    "preflight",
    "record_init_error",
    "repair_database",
]

log = logging.getLogger("hermes_state.sqlite.safety")

_last_init_error: str | None = None


def record_init_error(message: str | None) -> None:
    global _last_init_error
    _last_init_error = message


def get_last_init_error() -> str | None:
    """Return the last open failure or quarantine notice of this process, as text, or None."""
    return _last_init_error


def is_zeroed_file(path: os.PathLike[str] | str, probe_bytes: int = 100) -> bool:
    """True when the file exists, is not empty, and its first ``probe_bytes`` bytes (at least 16) are all NUL."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(max(16, probe_bytes))
    except OSError:
        return False
    return len(head) > 0 and head.count(0) == len(head)


def quarantine_zeroed_file(path: os.PathLike[str] | str) -> Path | None:
    """Move a zeroed database and its sidecars aside; returns the new path, or None if not zeroed."""
    path = Path(path)
    if not is_zeroed_file(path):
        return None
    target = set_aside(path, f"zeroed-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}", ".bak", move_private)
    notice = f"{path} was zeroed (all NUL bytes); moved aside to {target} and a fresh database was created"
    log.warning(notice)
    record_init_error(notice)
    return target


def preflight(path: Path, label: str = "state.db") -> None:
    """Before a writable open: create the parent directory (0700, see ``private_files``), move a
    zeroed file aside, and fail early, and clearly, on unwritable paths (``sqlite3.OperationalError``)."""
    parent = path.parent
    if path.is_dir():
        raise sqlite3.OperationalError(f"unable to open database file: {path} is a directory")
    try:
        make_private_dirs(parent)
    except OSError as exc:
        # The same wording as a read-only directory below, not a raw PermissionError.
        raise sqlite3.OperationalError(
            f"{label} is not writable: directory {parent} cannot be created for this user "
            f"({exc.strerror or exc}). Fix its permissions or point the store at another path."
        ) from None
    quarantine_zeroed_file(path)
    for kind, target in (("directory", parent), ("file", path), ("file", Path(f"{path}-wal")), ("file", Path(f"{path}-shm"))):
        if target.exists() and not os.access(target, os.R_OK | os.W_OK):
            raise sqlite3.OperationalError(
                f"{label} is not writable: {kind} {target} is read-only for this user. "
                "Fix its permissions or point the store at another path."
            )


def _integrity(conn: Any) -> str:
    from .search.fts_schema import present_tables

    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    except Exception as exc:  # a badly damaged file can fail the check itself
        return f"integrity_check failed: {exc}"
    if [r[0] for r in rows] != ["ok"]:
        return "; ".join(str(r[0]) for r in rows[:5])
    # SQLite before 3.44 leaves FTS5 indexes out of integrity_check; ask each index itself.
    for table in present_tables(conn):
        try:
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        except Exception as exc:
            return f"{table}: {exc}"
    return "ok"


# Schema rows that are exact copies of an earlier one (same type, name, table, root page and SQL).
_SCHEMA_COPIES_SQL = (
    "SELECT COUNT(*) FROM sqlite_master WHERE rowid NOT IN "
    "(SELECT MIN(rowid) FROM sqlite_master GROUP BY type, name, tbl_name, rootpage, sql)"
)


def _schema_duplicates(conn: Any) -> int:
    """How many schema rows are exact copies of another (readable only with ``writable_schema`` on)."""
    try:
        conn.execute("PRAGMA writable_schema=ON")  # schema parse errors are tolerated while it is on
        try:
            return int(conn.execute(_SCHEMA_COPIES_SQL).fetchone()[0])
        finally:
            conn.execute("PRAGMA writable_schema=OFF")
    except Exception:  # a file too damaged to read its schema at all: the other steps decide
        return 0


def _drop_schema_duplicates(conn: Any) -> None:
    conn.execute("PRAGMA writable_schema=ON")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("DELETE" + _SCHEMA_COPIES_SQL.removeprefix("SELECT COUNT(*)"))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.execute("PRAGMA writable_schema=OFF")


def repair_database(path: os.PathLike[str] | str, *, backup: bool = True) -> dict[str, Any]:
    """Try to repair a damaged ``state.db`` in place; returns what was done and what was recovered.

    The work behind ``hermes_state.repair_state_db_schema`` (a coroutine that
    runs this on a worker thread); blocking, for threads and the command line.

    Close every store on the file first. With ``backup`` the file and its
    sidecars are copied aside (private files) before anything changes,
    unless the newest backup already holds this very file (same size and
    mtime_ns): then that one is reused (``"backup_reused": True``). After a
    copy only the newest 3 backups are kept. Steps, each followed
    by an integrity check (``PRAGMA integrity_check`` plus each FTS index's
    own check) and stopping at the first clean result: drop schema rows that
    are exact copies of another (only when there are such), rebuild the
    full-text indexes from ``messages``, ``REINDEX``, ``VACUUM``, and last
    ``salvage``: copy every readable row into a fresh file that replaces the
    damaged one (which is kept: the backup, or without one the file itself
    moved aside). The result is ``{"ok": bool, "backup": path or None,
    "steps": [...], "integrity": "ok" or the remaining problems}`` plus the
    reference's keys for the same facts (``repaired``, ``strategy``: the step
    that made the file sound or ``"already_healthy"``, ``backup_path`` and
    ``error``), where
    ``ok`` means the file is sound now; after a salvage it also holds
    ``"recovered"`` (rows per table), ``"unreadable"`` (lost rowid ranges per
    table), ``"missing_tables"`` and ``"placeholder_sessions"``, which say
    what was lost. No step deletes a readable transcript row.

    Failed repairs are counted per version of the file in
    ``<db>.repair-attempts.json`` (``"failed_attempts"`` and ``"ledger"`` in
    the result); any success deletes it. After 3 failures on an unchanged
    file the function refuses at once, touching nothing: ``ok`` False,
    ``"refused": True`` and an ``"error"`` saying that manual recovery is
    required (``sqlite3 <db> ".recover"``) or that deleting the ledger
    allows another attempt.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no database file at {path}")
    refused = refusal(path)
    if refused is not None:
        log.error("repair of %s refused: %s", path, refused["error"])
        return _upstream_keys(refused)
    attempted = fingerprint(path)
    try:
        result = _repair(path, backup)
    except Exception:
        record_failed_repair(path, attempted)
        raise
    if result["ok"]:
        clear_ledger(path)
    else:
        result["failed_attempts"] = record_failed_repair(path, attempted)
        result["ledger"] = str(ledger_path(path))
    level = logging.WARNING if result["ok"] else logging.ERROR
    log.log(level, "repair of %s: %s", path, result)
    return _upstream_keys(result)


# The reference's name for the step that made the file sound, by ours.
_STRATEGIES = {
    "dedup_schema": "dedup_schema", "fts_rebuild": "rebuild_fts", "reindex": "reindex_btree", "vacuum": "vacuum",
    "salvage": "salvage",
}


def _upstream_keys(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the reference's keys beside ours: ``repaired``, ``strategy``, ``backup_path``, ``error``."""
    ok = bool(result.get("ok"))
    steps = [s for s in result.get("steps", ()) if " failed: " not in s]
    strategy = None
    if ok:
        strategy = _STRATEGIES.get(steps[-1], steps[-1]) if steps else "already_healthy"
    result["repaired"] = ok
    result["strategy"] = strategy
    result["backup_path"] = result.get("backup")
    if not ok and not result.get("error"):
        result["error"] = f"the file is still damaged after {', '.join(result.get('steps', ())) or 'no step'}: {result.get('integrity')}"
    result.setdefault("error", None)
    return result


def _repair(path: Path, backup: bool) -> dict[str, Any]:
    from .driver import driver_module
    from .salvage import salvage_rows
    from .search.fts_schema import rebuild_in_place

    result: dict[str, Any] = {"ok": False, "backup": None, "steps": [], "integrity": None}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if backup:
        copy, reused = forensic_backup(path, stamp)
        result["backup"], result["backup_reused"] = str(copy), reused

    def connect() -> Any:
        return driver_module().connect(str(path), isolation_level=None, timeout=5.0)

    conn = connect()
    try:
        result["integrity"] = _integrity(conn)
        if result["integrity"] == "ok":
            result["ok"] = True
            return result

        def fts_rebuild() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rebuild_in_place(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        def salvage() -> None:
            nonlocal conn
            fresh = path.with_name(f"{path.name}.salvage-{stamp}")
            fresh.unlink(missing_ok=True)
            create_private_file(fresh)  # it becomes the database: 0600 like a new one
            try:
                result.update(salvage_rows(conn, fresh))
            except BaseException:
                fresh.unlink(missing_ok=True)
                raise
            conn.close()
            if result["backup"] is None:
                result["backup"] = str(set_aside(path, f"malformed-{stamp}", "", move_private))
            # Sidecars of the damaged file must not be replayed into the fresh one.
            for suffix in ("-wal", "-shm", "-journal"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            os.replace(fresh, path)
            conn = connect()

        if _schema_duplicates(conn):
            # A schema row written twice (every statement then fails: "table ... already exists"):
            # drop the exact copies, nothing else, and read the schema afresh.
            try:
                _drop_schema_duplicates(conn)
                result["steps"].append("dedup_schema")
            except Exception as exc:
                result["steps"].append(f"dedup_schema failed: {exc}")
            conn.close()
            conn = connect()
            result["integrity"] = _integrity(conn)
            if result["integrity"] == "ok":
                result["ok"] = True
                return result

        for name, step in (
            ("fts_rebuild", fts_rebuild),
            ("reindex", lambda: conn.execute("REINDEX")),
            ("vacuum", lambda: conn.execute("VACUUM")),
            ("salvage", salvage),
        ):
            try:
                step()
                result["steps"].append(name)
            except Exception as exc:
                result["steps"].append(f"{name} failed: {exc}")
                continue
            result["integrity"] = _integrity(conn)
            if result["integrity"] == "ok":
                result["ok"] = True
                break
    finally:
        conn.close()
    return result
