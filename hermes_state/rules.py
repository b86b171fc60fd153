"""Backend-neutral write rules every backend's handlers apply the same way.

Pure functions on values already read from the database: which appends a
session admits, when a compression lease's holder is gone, how a re-created
session's ``model_config`` merges. Keeping them here makes SQLite and
PostgreSQL answer identically.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .errors import (
    CompressionSessionClosedError,
    SessionCompressionInProgressError,
    SessionNotFoundError,
)

__all__ = ["RESET_REASONS", "append_refusal", "holder_process_is_dead", "merged_model_config"]

# End reasons after which a child sharing the session_key is a reset continuation.
RESET_REASONS = ("session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired")

# A structured holder names its process: "pid=<N>:task=...:agent=...:nonce=...".
_HOLDER_PID = re.compile(r"(?:^|:)pid=(\d+)(?::|$)")


def holder_process_is_dead(holder: str) -> bool:
    """True only when ``holder`` names a local process (not this one) that no longer runs.

    An unreaped zombie counts as dead. Any doubt (no pid field, permission
    errors, an unreadable /proc) answers False, so a live lease is never stolen.
    """
    match = _HOLDER_PID.search(holder or "")
    if match is None:
        return False
    pid = int(match.group(1))
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError, OverflowError):
        return False
    try:
        # Field 3 of /proc/<pid>/stat is the state; "Z" is a killed, unreaped process.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def append_refusal(
    session_id: str, exists: bool, closed_by: str | None, lease_holder: str | None, holder: str | None
) -> BaseException | None:
    """None when an append may go ahead, else the exception its caller gets.

    ``closed_by`` is the end reason of an ended session (None while open);
    ``lease_holder`` the holder of a live compression lease, if any.
    """
    # Closed first: waiting out a lease on a session that can never take the
    # append again would only delay the error that tells the caller where to go.
    # A lease whose holder process is dead blocks no one.
    if closed_by == "compression":
        return CompressionSessionClosedError(session_id)
    if lease_holder is not None and lease_holder != holder and not holder_process_is_dead(lease_holder):
        return SessionCompressionInProgressError(session_id)
    if not exists:
        return SessionNotFoundError(session_id)
    return None


def merged_model_config(stored: str | None, given: str | None) -> str | None:
    """Stored config wins, except a bare ``{"_reset_from": X}`` marker takes the new config."""
    if stored is None:
        return given
    if given is None:
        return stored
    try:
        old = json.loads(stored)
        new = json.loads(given)
    except (ValueError, RecursionError):  # RecursionError: a stored config nested too deep to parse
        return stored
    if isinstance(old, dict) and list(old) == ["_reset_from"] and isinstance(new, dict):
        new["_reset_from"] = old["_reset_from"]
        return json.dumps(new)
    return stored
