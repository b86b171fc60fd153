"""What ``repair_state_db_schema`` keeps beside a database: its attempt ledger and its forensic backups.

The ledger, ``<db>.repair-attempts.json``, counts failed repairs of one
version of the file, named by its fingerprint (``<size>:<mtime_ns>``). After
:data:`MAX_FAILED_REPAIRS` failures on the same fingerprint a repair refuses
to run again (the same surgery would fail the same way and only add
backups); a changed file starts the count again, and any successful repair
deletes the ledger.

Backups are ``<db>.malformed-backup-<YYYYmmdd-HHMMSS>[-n]`` plus copies of the
``-wal``/``-journal`` sidecars. A damaged file that did not change since the
newest backup (same size and mtime_ns, sidecars included) reuses it; after
a new copy only the newest :data:`KEEP_BACKUPS` remain, with their sidecars.
Both are private files (``hermes_state.private_files``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Callable

from ..private_files import copy_private, write_private

__all__ = [
    "KEEP_BACKUPS",
    "MAX_FAILED_REPAIRS",
    "clear_ledger",
    "fingerprint",
    "forensic_backup",
    "ledger_path",
    "record_failed_repair",
    "refusal",
    "set_aside",
]

log = logging.getLogger("hermes_state.sqlite.safety")

MAX_FAILED_REPAIRS = 3
KEEP_BACKUPS = 3
SIDECARS = ("-wal", "-shm", "-journal")
# Sidecars whose bytes matter to a backup (-shm is rebuilt from the WAL).
_CONTENT_SIDECARS = ("-wal", "-journal")
_BACKUP_LABEL = "malformed-backup"


def set_aside(path: Path, label: str, ending: str, transfer: Callable[[Any, Any], Any]) -> Path:
    """Move or copy ``path`` and its sidecars to the first free ``<name>.<label>[-n]<ending>``."""
    n = 0
    while True:
        target = path.with_name(f"{path.name}.{label}{f'-{n}' if n else ''}{ending}")
        n += 1
        if target.exists():
            continue
        try:
            transfer(path, target)
        except FileExistsError:  # taken between the check and the copy
            continue
        break
    for suffix in SIDECARS:
        sidecar = Path(f"{path}{suffix}")
        if sidecar.exists():
            copy = Path(f"{target}{suffix}")
            copy.unlink(missing_ok=True)  # a leftover beside a free name belongs to nothing
            transfer(sidecar, copy)
    return target


# ----------------------------------------------------------------------- ledger


def ledger_path(db: Path) -> Path:
    return db.with_name(f"{db.name}.repair-attempts.json")


def fingerprint(db: Path) -> str:
    """``<size>:<mtime_ns>`` of the database file."""
    stat = db.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _read_ledger(db: Path) -> dict[str, Any]:
    try:
        entry = json.loads(ledger_path(db).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring an unreadable repair ledger %s: %s", ledger_path(db), exc)
        return {}
    if not isinstance(entry, dict) or not isinstance(entry.get("failed_attempts"), int):
        log.warning("ignoring a repair ledger of an unknown shape: %s", ledger_path(db))
        return {}
    return entry


def refusal(db: Path) -> dict[str, Any] | None:
    """The report of a repair that must not run again (this file version failed too often), else None."""
    entry = _read_ledger(db)
    count = entry.get("failed_attempts", 0)
    if count < MAX_FAILED_REPAIRS or entry.get("fingerprint") != fingerprint(db):
        return None
    ledger = ledger_path(db)
    error = (
        f"{count} repair attempts of {db} failed on this same file; manual recovery is required: "
        f'run `sqlite3 {db} ".recover"` into a new database (or restore a backup), or delete {ledger} '
        "to let repair_state_db_schema try again"
    )
    return {"ok": False, "backup": None, "steps": [], "integrity": None, "refused": True,
            "failed_attempts": count, "ledger": str(ledger), "error": error}


def record_failed_repair(db: Path, attempted: str) -> int:
    """Count a failed repair of the file version ``attempted`` (its fingerprint before the attempt); returns the count.

    The ledger stores the fingerprint the file has now, which the next
    attempt compares against.
    """
    entry = _read_ledger(db)
    count = entry["failed_attempts"] + 1 if entry.get("fingerprint") == attempted else 1
    now = fingerprint(db) if db.exists() else attempted
    record = {"fingerprint": now, "failed_attempts": count,
              "last_attempt": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        write_private(ledger_path(db), json.dumps(record, indent=2).encode())
    except OSError as exc:  # the ledger is advice: never hide the repair's own outcome behind it
        log.warning("could not record the failed repair in %s: %s", ledger_path(db), exc)
    return count


def clear_ledger(db: Path) -> None:
    try:
        ledger_path(db).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete the repair ledger %s: %s", ledger_path(db), exc)


# ---------------------------------------------------------------------- backups

_BACKUP_NAME = re.compile(rf"\.{_BACKUP_LABEL}-(\d{{8}}-\d{{6}})(?:-(\d+))?")


def _backups(db: Path) -> list[tuple[tuple[str, int], Path]]:
    """This database's backups, oldest first (by stamp, then collision number)."""
    found = []
    for candidate in db.parent.glob(f"{db.name}.{_BACKUP_LABEL}-*"):
        match = _BACKUP_NAME.fullmatch(candidate.name[len(db.name):])
        if match is not None and candidate.is_file():
            found.append(((match.group(1), int(match.group(2) or 0)), candidate))
    found.sort()
    return found


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.stat(), b.stat()
    except FileNotFoundError:
        return not a.exists() and not b.exists()
    return (sa.st_size, sa.st_mtime_ns) == (sb.st_size, sb.st_mtime_ns)


def _unchanged_since(db: Path, backup: Path) -> bool:
    return _same_file(db, backup) and all(
        _same_file(Path(f"{db}{suffix}"), Path(f"{backup}{suffix}")) for suffix in _CONTENT_SIDECARS
    )


def forensic_backup(db: Path, stamp: str) -> tuple[Path, bool]:
    """Copy the damaged file and its sidecars aside (private files); returns ``(backup, reused)``.

    An unchanged file reuses the newest backup. After a copy, backups older
    than the newest :data:`KEEP_BACKUPS` are deleted with their sidecars.
    """
    existing = _backups(db)
    if existing and _unchanged_since(db, existing[-1][1]):
        return existing[-1][1], True
    target = set_aside(db, f"{_BACKUP_LABEL}-{stamp}", "", copy_private)
    for _, old in _backups(db)[:-KEEP_BACKUPS]:
        for path in (old, *(Path(f"{old}{suffix}") for suffix in SIDECARS)):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not delete the old repair backup %s: %s", path, exc)
    return target, False
