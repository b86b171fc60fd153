"""Open-time safety: a zeroed ``state.db`` is moved aside instead of failing every open.

A crash during a file-system level copy or a bad restore can leave a file of
the right size full of NUL bytes. SQLite reports such a file as "not a
database" forever; moving it (and its sidecars) aside lets a fresh database
be created while keeping the bytes for inspection.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

__all__ = ["is_zeroed_state_db", "quarantine_zeroed_state_db", "get_last_init_error", "record_init_error"]

log = logging.getLogger("hermes_state.sqlite.safety")

_last_init_error: str | None = None


def record_init_error(message: str | None) -> None:
    global _last_init_error
    _last_init_error = message


def get_last_init_error() -> str | None:
    """Return the last open failure or quarantine notice of this process, as text, or None."""
    return _last_init_error


def is_zeroed_state_db(path: os.PathLike[str] | str) -> bool:
    """True when the file exists, is not empty, and its first 100 bytes are all NUL."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(100)
    except OSError:
        return False
    return len(head) > 0 and head.count(0) == len(head)


def quarantine_zeroed_state_db(path: os.PathLike[str] | str) -> Path | None:
    """Move a zeroed database and its sidecars aside; returns the new path, or None if not zeroed."""
    path = Path(path)
    if not is_zeroed_state_db(path):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.zeroed-{stamp}-{os.getpid()}.bak")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.zeroed-{stamp}-{os.getpid()}-{n}.bak")
        n += 1
    os.replace(path, target)
    for suffix in ("-wal", "-shm", "-journal"):
        sidecar = Path(f"{path}{suffix}")
        if sidecar.exists():
            os.replace(sidecar, Path(f"{target}{suffix}"))
    notice = f"{path} was zeroed (all NUL bytes); moved aside to {target} and a fresh database was created"
    log.warning(notice)
    record_init_error(notice)
    return target
