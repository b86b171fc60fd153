"""Backend-neutral write rules every backend's handlers apply the same way.

Pure functions on values already read from the database: which transcript
writes a session admits (turn-lease fence, closed by compression), when a
turn lease may be taken over, when a compression lease's holder is gone, how a re-created
session's ``model_config`` merges. Keeping them here makes SQLite and
PostgreSQL answer identically.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

from .commands.leases import TurnFence
from .errors import (
    CompressionSessionClosedError,
    SessionNotFoundError,
    SessionTurnLeaseLostError,
)
from .lease_host import is_local, own_process, pid_is_gone, process_is_gone, reads_proc
from .off_loop import off_loop

T = TypeVar("T")

__all__ = [
    "import_result",
    "CounterChange",
    "RestorePlan",
    "restore_counter_changes",
    "restore_gap",
    "restore_plan",
    "restore_result",
    "restore_title_clash",
    "CHILD_INHERITED_COLUMNS",
    "NUMBERED_TITLE",
    "RESET_REASONS",
    "TITLE_RANK",
    "append_refusal",
    "fence_holds",
    "fence_renewal_due",
    "holder_process_is_dead",
    "turn_lease_takeover",
    "turn_waiter_alive",
    "turn_waiter_alive_on_loop",
    "like_escape",
    "merged_model_config",
    "numbered_titles",
    "patched_model_config",
    "title_rank",
]

# End reasons after which a child sharing the session_key is a reset continuation.
RESET_REASONS = ("session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired")

# Parent columns a compression continuation child copies (cwd and profile_name only when not given).
CHILD_INHERITED_COLUMNS = (
    "git_branch", "git_repo_root", "user_id", "session_key", "chat_id", "chat_type",
    "thread_id", "display_name", "origin_json",
)

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
    return pid != os.getpid() and pid_is_gone(pid)


def fence_holds(fence: TurnFence | None, lease_holder: str | None, lease_token: int | None) -> bool:
    """Whether a write carrying ``fence`` may go ahead against the conversation's lease row.

    No fence: always. Otherwise the row must exist and name the fence's
    holder and, when the fence carries one, its token. Expiry is not
    checked here: an expired row nobody took over still belongs to its
    holder, and the write renews it (see :func:`fence_renewal_due`).
    """
    if fence is None:
        return True
    if lease_holder is None or lease_holder != fence.holder:
        return False
    return fence.token is None or lease_token == fence.token


def fence_renewal_due(fence: TurnFence | None, expires_at: float | None, now: float) -> bool:
    """Whether an admitted fenced write must renew its (expired) lease to now + the fence's TTL."""
    return fence is not None and expires_at is not None and expires_at <= now


def append_refusal(session_id: str, exists: bool, closed_by: str | None, fence_ok: bool = True) -> BaseException | None:
    """None when a transcript write may go ahead, else the exception its caller gets.

    ``closed_by`` is the end reason of an ended session (None while open);
    ``fence_ok`` the verdict of :func:`fence_holds`. The lease is judged
    first (upstream's order): a stale writer learns it lost the turn before
    anything about the session. A compression lease never refuses a write:
    the compaction's watermark keeps rows written meanwhile.
    """
    if not fence_ok:
        return SessionTurnLeaseLostError(session_id)
    if closed_by == "compression":
        return CompressionSessionClosedError(session_id)
    if not exists:
        return SessionNotFoundError(session_id)
    return None


def turn_lease_takeover(
    holder: str,
    exclusive: bool,
    row_holder: str,
    expires_at: float,
    row_host: str | None,
    row_pid: int | None,
    row_started: int | None,
    now: float,
) -> str:
    """What an acquire does with an existing lease row: ``"held"`` (re-entrant), ``"busy"`` or ``"take"``.

    Re-entrant means the same holder from this very process (or a row that
    records no process, as upstream writes them); the same holder string
    from another process is somebody else. An expired row, or one whose
    recorded process is gone (same host only, see ``lease_host``), is taken over.
    """
    if expires_at <= now or process_is_gone(row_host, row_pid, row_started):
        return "take"
    same_process = row_host is None or (is_local(row_host) and row_pid == os.getpid())
    if row_holder == holder and same_process and not exclusive:
        return "held"
    return "busy"


async def turn_lease_takeover_on_loop(
    holder: str,
    exclusive: bool,
    row_holder: str,
    expires_at: float,
    row_host: str | None,
    row_pid: int | None,
    row_started: int | None,
    now: float,
) -> str:
    """:func:`turn_lease_takeover` for a caller on the event loop: a judgement that reads ``/proc`` runs on a thread."""
    args = (holder, exclusive, row_holder, expires_at, row_host, row_pid, row_started, now)
    return await _judge_on_loop(turn_lease_takeover, args, expires_at > now, row_host, row_pid)


def turn_waiter_alive(expires_at: float, host: str | None, pid: int | None, started: int | None, now: float) -> bool:
    """Whether a queued turn-lease waiter still counts: its ticket not expired and its process (if local) running."""
    return expires_at > now and not process_is_gone(host, pid, started)


async def turn_waiter_alive_on_loop(
    expires_at: float, host: str | None, pid: int | None, started: int | None, now: float
) -> bool:
    """:func:`turn_waiter_alive` for a caller on the event loop: a judgement that reads ``/proc`` runs on a thread."""
    args = (expires_at, host, pid, started, now)
    return await _judge_on_loop(turn_waiter_alive, args, expires_at > now, host, pid)


async def _judge_on_loop(
    judge: Callable[..., T], args: tuple[Any, ...], live: bool, host: str | None, pid: int | None
) -> T:
    """``judge(*args)`` from the event loop: on a worker thread when a ``live`` row's ``(host, pid)`` is another
    process's ``/proc`` to read."""
    # First: this process's host token and start time, read off the loop once (``reads_proc`` compares with them).
    await own_process()
    if live and reads_proc(host, pid):
        return await off_loop(judge, *args)
    return judge(*args)


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


def patched_model_config(stored: str | None, patch_json: str) -> str:
    """``stored`` (an object, else ``{}``) with each key of ``patch_json`` set, or removed when null."""
    try:
        config = json.loads(stored) if stored else {}
    except (ValueError, RecursionError):  # RecursionError: a stored config nested too deep to parse
        config = {}
    if not isinstance(config, dict):
        config = {}
    for key, value in json.loads(patch_json).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return json.dumps(config)


# Authority of a title's provenance; an automatic title never replaces an equal or higher one.
TITLE_RANK = {"derived": 0, "llm": 1, "user": 2}

# "<base> #<n>": the numbering compression rotations give continuation titles.
NUMBERED_TITLE = re.compile(r"^(.*?) #(\d+)$", re.DOTALL)


def title_rank(source: str | None) -> int:
    """Rank of a stored title's provenance; a titled row without one predates it and was named by hand."""
    return TITLE_RANK["user"] if source is None else TITLE_RANK.get(source, 0)


def numbered_titles(rows: Iterable[tuple[str, str | None, float | None]], base: str) -> list[tuple[str, int, float]]:
    """``(id, n, started_at)`` of the ``(id, title, started_at)`` rows titled exactly ``"<base> #<n>"``.

    Drops what a LIKE prefilter over-matches (other letter case, a non-numeric suffix).
    """
    found = []
    for session_id, title, started_at in rows:
        match = NUMBERED_TITLE.match(title or "")
        if match and match.group(1) == base:
            found.append((session_id, int(match.group(2)), started_at or 0.0))
    return found


def like_escape(text: str) -> str:
    """``text`` as a literal LIKE pattern with ``\\`` as the escape character."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def import_result(sessions: Iterable[Any], fresh: list[Any], existing: set[str], detached: int) -> dict[str, Any]:
    """Return ``import_sessions``' result dict: what was imported, skipped (already stored) and detached."""
    skipped = [item.session_id for item in sessions if item.session_id in existing]
    return {
        "ok": True,
        "imported": len(fresh),
        "skipped": len(skipped),
        "detached": detached,
        "imported_ids": [item.session_id for item in fresh],
        "skipped_ids": skipped,
        "errors": [],
    }


class RestorePlan(NamedTuple):
    """What a ``RestoreRows`` handler writes: rows, then the parent links, after checking the titles."""

    rows: list[tuple[Any, ...]]  # the first row of each key; sessions without their parent link
    links: dict[str, str]  # session id -> parent, set once every row of the call is in
    titles: list[tuple[str, str]]  # (session id, title) of the rows that carry a title


def restore_plan(table: str, key: Sequence[str], columns: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> RestorePlan:
    """Split a ``RestoreRows`` command into a :class:`RestorePlan` (the same on every backend)."""
    at = [columns.index(name) for name in key]
    first: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:  # a key named twice: the first row counts, the second is skipped
        first.setdefault(tuple(row[i] for i in at), row)
    plan = list(first.values())
    links: dict[str, str] = {}
    titles: list[tuple[str, str]] = []
    if table == "sessions":
        if "title" in columns:
            t = columns.index("title")
            titles = [(row[at[0]], row[t]) for row in plan if row[t] is not None]
        if "parent_session_id" in columns:
            p = columns.index("parent_session_id")
            links = {row[at[0]]: row[p] for row in plan if row[p] is not None}
            plan = [(*row[:p], None, *row[p + 1 :]) for row in plan]
    return RestorePlan(plan, links, titles)


def restore_result(
    key: Sequence[str], columns: Sequence[str], rows: Iterable[tuple[Any, ...]], inserted: set[tuple[Any, ...]], detached: list[str]
) -> dict[str, Any]:
    """``restore_rows``' result: how many rows went in, the keys left alone, the sessions stored without their parent."""
    at = [columns.index(name) for name in key]
    keys = [tuple(row[i] for i in at) for row in rows]
    return {"inserted": len(inserted), "skipped": [k for k in keys if k not in inserted], "detached": detached}


def restore_title_clash(rows: Iterable[tuple[str, str]], holders: dict[str, str]) -> str | None:
    """Why a restore of ``(session id, title)`` rows breaks title uniqueness, or None.

    ``holders`` maps each of those titles to the session holding it in the
    store; a row may keep its own title (its session is skipped as present).
    """
    seen = dict(holders)
    for session_id, title in rows:
        holder = seen.setdefault(title, session_id)
        if holder != session_id:
            return f"session {session_id!r}: title {title!r} is already used by session {holder!r}"
    return None


class CounterChange(NamedTuple):
    """One session counter a ``RestoreMessages`` writes: ``value`` added to the stored count (NULL as 0), or set."""

    column: str
    grow: bool
    value: Any


def restore_counter_changes(calls: Sequence[int], counters: Sequence[tuple[str, Any]], skipped: int) -> list[CounterChange]:
    """What a ``RestoreMessages`` does to its session's counters once its rows after the first ``skipped`` are in.

    The values it carries (the source's, the session being whole) are set;
    without them the counters grow by the rows inserted and their tool calls
    (``calls``, one per row), so they agree with the rows at every commit.
    """
    if counters:
        return [CounterChange(name, False, value) for name, value in counters]
    added = calls[skipped:]
    if not added:
        return []
    return [CounterChange("message_count", True, len(added)), CounterChange("tool_call_count", True, sum(added))]


def restore_gap(session_id: str, have: int, start: int) -> str | None:
    """Why messages for positions ``start``... cannot follow the ``have`` a session holds, or None."""
    if start <= have:
        return None
    return f"session {session_id!r} holds {have} message(s); rows for position {start} on would leave a gap"
