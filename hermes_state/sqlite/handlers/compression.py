"""Handlers for compression leases, compaction, continuation children, cooldowns and rewind."""

from __future__ import annotations

import time
from typing import Any

from ...commands.compression import (
    AcquireCompressionLock,
    ArchiveAndCompact,
    FinalizeOrphanedCompressionSessions,
    PublishCompressionChild,
    RefreshCompressionLock,
    ReleaseCompressionLock,
    ReopenOrphanedCompressionSession,
    RestoreRewound,
    RewindToMessage,
    SetCompressionCooldown,
    SetCompressionCounter,
)
from ...encoding import decode_message_row, encode_tool_calls
from ...errors import CompressionSessionBusyError, SessionCompressionInProgressError
from ...rules import CHILD_INHERITED_COLUMNS, patched_model_config
from ..queries.compression import continuation_sql
from ..queries.core import fetch_dicts
from .common import holder_process_is_dead, require_fence, require_session, store_prompt
from .message_rows import MESSAGE_COLUMNS
from .messages import insert_rows
from .registry import handles


@handles(AcquireCompressionLock)
def acquire_compression_lock(conn: Any, cmd: AcquireCompressionLock) -> tuple[bool, str | None]:
    now = time.time()
    reclaimed = None
    row = conn.execute(
        "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (cmd.session_id,)
    ).fetchone()
    if row is not None and (row[1] < now or holder_process_is_dead(row[0])):
        conn.execute("DELETE FROM compression_locks WHERE session_id = ? AND holder = ?", (cmd.session_id, row[0]))
        reclaimed = row[0]
    conn.execute(
        "INSERT OR IGNORE INTO compression_locks (session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
        (cmd.session_id, cmd.holder, now, now + cmd.ttl_seconds),
    )
    owner = conn.execute("SELECT holder FROM compression_locks WHERE session_id = ?", (cmd.session_id,)).fetchone()
    return (owner is not None and owner[0] == cmd.holder), reclaimed


@handles(RefreshCompressionLock)
def refresh_compression_lock(conn: Any, cmd: RefreshCompressionLock) -> bool:
    # Ownership is the holder string alone: an owner whose refresher stalled past
    # the TTL revives its row as long as nobody reclaimed it meanwhile.
    cur = conn.execute(
        "UPDATE compression_locks SET expires_at = ? WHERE session_id = ? AND holder = ?",
        (time.time() + cmd.ttl_seconds, cmd.session_id, cmd.holder),
    )
    return cur.rowcount > 0


@handles(ReleaseCompressionLock)
def release_compression_lock(conn: Any, cmd: ReleaseCompressionLock) -> None:
    conn.execute("DELETE FROM compression_locks WHERE session_id = ? AND holder = ?", (cmd.session_id, cmd.holder))


def _set_counts(conn: Any, session_id: str, added: int, calls: int) -> None:
    conn.execute(
        "UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?", (added, calls, session_id)
    )


def _tail(conn: Any, session_id: str, watermark: int, ceiling: int | None = None) -> tuple[list[int], int]:
    """The ids of the session's active rows above ``watermark`` (up to ``ceiling``), in order, and their tool calls."""
    sql = "SELECT id, tool_calls FROM messages WHERE session_id = ? AND active = 1 AND id > ?"
    params: list[Any] = [session_id, watermark]
    if ceiling is not None:
        sql += " AND id <= ?"
        params.append(ceiling)
    rows = conn.execute(sql + " ORDER BY id", params).fetchall()
    return [r[0] for r in rows], sum(encode_tool_calls(r[1])[1] for r in rows)


_CLONED = ", ".join(MESSAGE_COLUMNS[1:])


def _clone(conn: Any, ids: list[int], session_id: str) -> None:
    """Copy rows ``ids`` (in id order) to the end of ``session_id`` as new active rows; the originals stay."""
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        conn.execute(
            f"INSERT INTO messages (session_id, {_CLONED}) SELECT ?, {_CLONED} FROM messages "
            f"WHERE id IN ({', '.join('?' * len(chunk))}) ORDER BY id",
            (session_id, *chunk),
        )


def _require_compression_lease(conn: Any, session_id: str, holder: str, now: float) -> None:
    lease = conn.execute("SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (session_id,)).fetchone()
    if lease is None or lease[0] != holder or float(lease[1]) <= now:
        raise SessionCompressionInProgressError(
            session_id,
            f"Compression lease for '{session_id}' lost before commit; refusing to publish a stale compaction",
        )


@handles(ArchiveAndCompact)
def archive_and_compact(conn: Any, cmd: ArchiveAndCompact) -> int:
    now = time.time()
    require_fence(conn, cmd.session_id, cmd.fence, now)
    if cmd.lock_holder is not None:
        _require_compression_lease(conn, cmd.session_id, cmd.lock_holder, now)
    if cmd.model_config_patch is not None:
        row = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
        if row is None:
            raise RuntimeError(f"Session not found: {cmd.session_id}")
        conn.execute(
            "UPDATE sessions SET model_config = ? WHERE id = ?",
            (patched_model_config(row[0], cmd.model_config_patch), cmd.session_id),
        )
    elif cmd.rows:
        require_session(conn, cmd.session_id)
    tail, tail_calls = _tail(conn, cmd.session_id, cmd.watermark) if cmd.watermark is not None else ([], 0)
    conn.execute(
        "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? AND active = 1", (cmd.session_id,)
    )
    added, calls = insert_rows(conn, cmd.session_id, cmd.rows)
    _clone(conn, tail, cmd.session_id)
    _set_counts(conn, cmd.session_id, added + len(tail), calls + tail_calls)
    return added + len(tail)


_INHERITED = CHILD_INHERITED_COLUMNS
_CHILD_COLUMNS = (
    "id", "source", "model", "model_config", "system_prompt_hash", "parent_session_id",
    "cwd", "profile_name", *_INHERITED, "started_at",
)
_INSERT_CHILD_SQL = (
    f"INSERT INTO sessions ({', '.join(_CHILD_COLUMNS)}) VALUES ({', '.join('?' * len(_CHILD_COLUMNS))})"
)


@handles(PublishCompressionChild)
def publish_compression_child(conn: Any, cmd: PublishCompressionChild) -> None:
    now = time.time()
    parent_id = cmd.parent_session_id
    require_fence(conn, parent_id, cmd.fence, now)
    if cmd.require_compression_lease:
        lease = conn.execute(
            "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (parent_id,)
        ).fetchone()
        if lease is None or not cmd.compression_lock_holder or lease[0] != cmd.compression_lock_holder or float(
            lease[1]
        ) <= now:
            raise CompressionSessionBusyError(f"Compression lease lost before publication: {parent_id}")
    parent = conn.execute(
        f"SELECT ended_at, cwd, profile_name, {', '.join(_INHERITED)} FROM sessions WHERE id = ?", (parent_id,)
    ).fetchone()
    if parent is None:
        raise RuntimeError(f"Compression parent not found: {parent_id}")
    if parent[0] is not None:
        raise RuntimeError(f"Compression parent already ended: {parent_id}")
    store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    conn.execute(
        _INSERT_CHILD_SQL,
        (
            cmd.child_session_id, cmd.source, cmd.model, cmd.model_config, cmd.system_prompt_hash, parent_id,
            cmd.cwd or parent[1], cmd.profile_name or parent[2], *parent[3:], now,
        ),
    )
    added, calls = insert_rows(conn, cmd.child_session_id, cmd.rows)
    if cmd.watermark is not None:
        tail, tail_calls = _tail(conn, parent_id, cmd.watermark, cmd.watermark_ceiling)
        _clone(conn, tail, cmd.child_session_id)
        added, calls = added + len(tail), calls + tail_calls
    _set_counts(conn, cmd.child_session_id, added, calls)
    ended = conn.execute(
        "UPDATE sessions SET ended_at = ?, end_reason = 'compression' WHERE id = ? AND ended_at IS NULL",
        (now, parent_id),
    )
    if ended.rowcount != 1:
        raise RuntimeError(f"Compression parent changed during publication: {parent_id}")


_HAS_CONTINUATION_SQL = (
    f"SELECT 1 FROM sessions AS c WHERE c.parent_session_id = ? AND {continuation_sql('c')} LIMIT 1"
)


@handles(ReopenOrphanedCompressionSession)
def reopen_orphaned_compression_session(conn: Any, cmd: ReopenOrphanedCompressionSession) -> bool:
    row = conn.execute("SELECT ended_at, end_reason FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
    if row is None or row[0] is None or row[1] != "compression":
        return False
    # Any continuation, open or ended, means the handoff happened; reopening
    # would give the conversation two live heads.
    if conn.execute(_HAS_CONTINUATION_SQL, (cmd.session_id,)).fetchone() is not None:
        return False
    lease = conn.execute(
        "SELECT holder, expires_at FROM compression_locks WHERE session_id = ?", (cmd.session_id,)
    ).fetchone()
    if lease is not None:
        if lease[1] is None or float(lease[1]) >= time.time():
            return False
        # Removed in this transaction so its owner cannot refresh it back to life.
        conn.execute(
            "DELETE FROM compression_locks WHERE session_id = ? AND holder = ? AND expires_at = ?",
            (cmd.session_id, lease[0], lease[1]),
        )
    cur = conn.execute(
        "UPDATE sessions SET ended_at = NULL, end_reason = NULL "
        "WHERE id = ? AND ended_at IS NOT NULL AND end_reason = 'compression'",
        (cmd.session_id,),
    )
    return cur.rowcount == 1


@handles(FinalizeOrphanedCompressionSessions)
def finalize_orphaned_compression_sessions(conn: Any, cmd: FinalizeOrphanedCompressionSessions) -> int:
    cur = conn.execute(
        """
        UPDATE sessions SET ended_at = ?, end_reason = 'orphaned_compression'
        WHERE COALESCE(api_call_count, 0) = 0
          AND ended_at IS NULL AND end_reason IS NULL
          AND started_at < ?
          AND parent_session_id IS NOT NULL
          AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = sessions.parent_session_id
                      AND p.end_reason = 'compression' AND p.ended_at IS NOT NULL)
          AND EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = sessions.id)
        """,
        (time.time(), cmd.cutoff),
    )
    return int(cur.rowcount)


@handles(SetCompressionCooldown)
def set_compression_cooldown(conn: Any, cmd: SetCompressionCooldown) -> None:
    cur = conn.execute(
        "UPDATE sessions SET compression_failure_cooldown_until = ?, compression_failure_error = ? WHERE id = ?",
        (cmd.cooldown_until, cmd.error, cmd.session_id),
    )
    if cmd.require_row and cur.rowcount != 1:
        raise RuntimeError(f"compression cooldown rollback session missing: {cmd.session_id}")


_COUNTER_COLUMNS = ("compression_fallback_streak", "compression_ineffective_count")


@handles(SetCompressionCounter)
def set_compression_counter(conn: Any, cmd: SetCompressionCounter) -> None:
    if cmd.column not in _COUNTER_COLUMNS:
        raise ValueError(f"unknown compression counter: {cmd.column!r}")
    conn.execute(f"UPDATE sessions SET {cmd.column} = ? WHERE id = ?", (max(0, cmd.value), cmd.session_id))


@handles(RewindToMessage)
def rewind_to_message(conn: Any, cmd: RewindToMessage) -> dict[str, Any]:
    require_fence(conn, cmd.session_id, cmd.fence, time.time())
    found = fetch_dicts(
        conn, "SELECT * FROM messages WHERE id = ? AND session_id = ?", (cmd.target_message_id, cmd.session_id)
    )
    if not found:
        raise ValueError(f"message {cmd.target_message_id} not found in session {cmd.session_id}")
    # The reference hands display_metadata back as the JSON text the column holds.
    stored_metadata = found[0].get("display_metadata")
    target = decode_message_row(found[0])
    target["display_metadata"] = stored_metadata
    if target["role"] != "user":
        raise ValueError(
            f"rewind target must be a 'user' message (got role={target['role']!r}, id={cmd.target_message_id})"
        )
    cur = conn.execute(
        "UPDATE messages SET active = 0 WHERE session_id = ? AND id >= ? AND active = 1",
        (cmd.session_id, cmd.target_message_id),
    )
    conn.execute(
        "UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 WHERE id = ?", (cmd.session_id,)
    )
    head = conn.execute(
        "SELECT MAX(id) FROM messages WHERE session_id = ? AND active = 1", (cmd.session_id,)
    ).fetchone()
    return {"rewound_count": int(cur.rowcount), "target_message": target, "new_head_id": head[0]}


@handles(RestoreRewound)
def restore_rewound(conn: Any, cmd: RestoreRewound) -> int:
    cur = conn.execute(
        "UPDATE messages SET active = 1 WHERE session_id = ? AND id >= ? AND active = 0",
        (cmd.session_id, cmd.since_message_id),
    )
    return int(cur.rowcount)
