"""Handlers for compression leases, compaction, continuation children, cooldowns and rewind.

The rules and messages of ``sqlite.handlers.compression``. A lease whose
``pid=`` holder process is gone is reclaimed at once, as on SQLite, but only
when the row was written from this process table (``lease_host``): workers
on other hosts share the database, and their pids name nothing here, so
their leases end by expiry or release. Leases work across processes and hosts through the
``compression_locks`` primary key: the reclaim reads the row ``FOR UPDATE``
and the claim is an ``INSERT ... ON CONFLICT DO NOTHING``, so of two stores
racing for one lease the second waits for the first to commit and then
finds the row taken.
"""

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
from ...lease_host import is_local, own_process
from ...off_loop import off_loop
from ...rules import CHILD_INHERITED_COLUMNS, holder_process_is_dead, patched_model_config
from ..clock import DB_NOW
from ..lineage_sql import continuation_sql
from ..queries.core import MESSAGE_SELECT, message_dict
from .common import MESSAGE_COLUMNS, insert_messages, require_fence, require_session, row_count, store_prompt
from .registry import handles


@handles(AcquireCompressionLock)
async def acquire_compression_lock(conn: Any, cmd: AcquireCompressionLock) -> tuple[bool, str | None]:
    reclaimed = None
    host, _, _ = await own_process()  # this process table's token: read once, off the loop
    row = await conn.fetchrow(
        "SELECT holder, expires_at, holder_host FROM compression_locks WHERE session_id = $1 FOR UPDATE", cmd.session_id
    )
    now = await conn.fetchval(f"SELECT {DB_NOW}")  # the database clock, after the row lock was granted
    # A local holder's liveness is read from /proc, on a worker thread.
    if row is not None and (row[1] < now or (is_local(row[2]) and await off_loop(holder_process_is_dead, row[0]))):
        await conn.execute("DELETE FROM compression_locks WHERE session_id = $1 AND holder = $2", cmd.session_id, row[0])
        reclaimed = row[0]
    await conn.execute(
        "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at, holder_host) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (session_id) DO NOTHING",
        cmd.session_id, cmd.holder, now, now + cmd.ttl_seconds, host,
    )
    owner = await conn.fetchval("SELECT holder FROM compression_locks WHERE session_id = $1", cmd.session_id)
    return owner == cmd.holder, reclaimed


@handles(RefreshCompressionLock)
async def refresh_compression_lock(conn: Any, cmd: RefreshCompressionLock) -> bool:
    # Ownership is the holder string alone: an owner whose refresher stalled past
    # the TTL revives its row as long as nobody reclaimed it meanwhile.
    status = await conn.execute(
        f"UPDATE compression_locks SET expires_at = {DB_NOW} + $1 WHERE session_id = $2 AND holder = $3",
        cmd.ttl_seconds, cmd.session_id, cmd.holder,
    )
    return row_count(status) > 0


@handles(ReleaseCompressionLock)
async def release_compression_lock(conn: Any, cmd: ReleaseCompressionLock) -> None:
    await conn.execute("DELETE FROM compression_locks WHERE session_id = $1 AND holder = $2", cmd.session_id, cmd.holder)


async def _set_counts(conn: Any, session_id: str, added: int, calls: int) -> None:
    await conn.execute(
        "UPDATE sessions SET message_count = $1, tool_call_count = $2 WHERE id = $3", added, calls, session_id
    )


async def _tail(conn: Any, session_id: str, watermark: int, ceiling: int | None = None) -> tuple[list[int], int]:
    """The ids of the session's active rows above ``watermark`` (up to ``ceiling``), in order, and their tool calls."""
    rows = await conn.fetch(
        "SELECT id, tool_calls FROM messages WHERE session_id = $1 AND active = 1 AND id > $2 "
        "AND ($3::int8 IS NULL OR id <= $3) ORDER BY id",
        session_id, watermark, ceiling,
    )
    return [r[0] for r in rows], sum(encode_tool_calls(r[1])[1] for r in rows)


_CLONED = ", ".join(f'"{name}"' for name, _ in MESSAGE_COLUMNS[1:])


async def _clone(conn: Any, ids: list[int], session_id: str) -> None:
    """Copy rows ``ids`` (in id order) to the end of ``session_id`` as new active rows; the originals stay."""
    if ids:
        await conn.execute(
            f"INSERT INTO messages (session_id, {_CLONED}) SELECT $1, {_CLONED} FROM messages "
            "WHERE id = ANY($2::int8[]) ORDER BY id",
            session_id, ids,
        )


async def _require_compression_lease(conn: Any, session_id: str, holder: str) -> None:
    live = await conn.fetchval(
        f"SELECT holder = $2 AND expires_at > {DB_NOW} FROM compression_locks WHERE session_id = $1 FOR SHARE",
        session_id, holder,
    )
    if not live:
        raise SessionCompressionInProgressError(
            session_id,
            f"Compression lease for '{session_id}' lost before commit; refusing to publish a stale compaction",
        )


@handles(ArchiveAndCompact)
async def archive_and_compact(conn: Any, cmd: ArchiveAndCompact) -> int:
    # The writer locked the session row first, so an append in flight from another
    # process has committed (and is archived or cloned below) or waits until after.
    await require_fence(conn, cmd.session_id, cmd.fence)
    if cmd.lock_holder is not None:
        await _require_compression_lease(conn, cmd.session_id, cmd.lock_holder)
    if cmd.model_config_patch is not None:
        row = await conn.fetchrow("SELECT model_config FROM sessions WHERE id = $1", cmd.session_id)
        if row is None:
            raise RuntimeError(f"Session not found: {cmd.session_id}")
        await conn.execute(
            "UPDATE sessions SET model_config = $1 WHERE id = $2",
            patched_model_config(row[0], cmd.model_config_patch), cmd.session_id,
        )
    elif cmd.rows:
        await require_session(conn, cmd.session_id)
    tail, tail_calls = await _tail(conn, cmd.session_id, cmd.watermark) if cmd.watermark is not None else ([], 0)
    await conn.execute(
        "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = $1 AND active = 1", cmd.session_id
    )
    await insert_messages(conn, [(cmd.session_id, row) for row in cmd.rows], count=False)
    await _clone(conn, tail, cmd.session_id)
    added = len(cmd.rows) + len(tail)
    await _set_counts(conn, cmd.session_id, added, sum(r.tool_call_count for r in cmd.rows) + tail_calls)
    return added


_INHERITED = CHILD_INHERITED_COLUMNS
_CHILD_COLUMNS = (
    "id", "source", "model", "model_config", "system_prompt_hash", "parent_session_id",
    "cwd", "profile_name", *_INHERITED, "started_at",
)
_INSERT_CHILD_SQL = (
    f"INSERT INTO sessions ({', '.join(_CHILD_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(_CHILD_COLUMNS) + 1))})"
)


@handles(PublishCompressionChild)
async def publish_compression_child(conn: Any, cmd: PublishCompressionChild) -> None:
    now = await conn.fetchval(f"SELECT {DB_NOW}")
    parent_id = cmd.parent_session_id
    await require_fence(conn, parent_id, cmd.fence)
    if cmd.require_compression_lease:
        lease = await conn.fetchrow(
            "SELECT holder, expires_at FROM compression_locks WHERE session_id = $1 FOR SHARE", parent_id
        )
        if lease is None or not cmd.compression_lock_holder or lease[0] != cmd.compression_lock_holder or float(
            lease[1]
        ) <= now:
            raise CompressionSessionBusyError(f"Compression lease lost before publication: {parent_id}")
    parent = await conn.fetchrow(
        f"SELECT ended_at, cwd, profile_name, {', '.join(_INHERITED)} FROM sessions WHERE id = $1", parent_id
    )
    if parent is None:
        raise RuntimeError(f"Compression parent not found: {parent_id}")
    if parent[0] is not None:
        raise RuntimeError(f"Compression parent already ended: {parent_id}")
    await store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    await conn.execute(
        _INSERT_CHILD_SQL,
        cmd.child_session_id, cmd.source, cmd.model, cmd.model_config, cmd.system_prompt_hash, parent_id,
        cmd.cwd or parent[1], cmd.profile_name or parent[2], *list(parent)[3:], now,
    )
    await insert_messages(conn, [(cmd.child_session_id, row) for row in cmd.rows], count=False)
    added, calls = len(cmd.rows), sum(r.tool_call_count for r in cmd.rows)
    if cmd.watermark is not None:
        tail, tail_calls = await _tail(conn, parent_id, cmd.watermark, cmd.watermark_ceiling)
        await _clone(conn, tail, cmd.child_session_id)
        added, calls = added + len(tail), calls + tail_calls
    await _set_counts(conn, cmd.child_session_id, added, calls)
    status = await conn.execute(
        "UPDATE sessions SET ended_at = $1, end_reason = 'compression' WHERE id = $2 AND ended_at IS NULL",
        now, parent_id,
    )
    if row_count(status) != 1:
        raise RuntimeError(f"Compression parent changed during publication: {parent_id}")


_HAS_CONTINUATION_SQL = (
    f"SELECT 1 FROM sessions AS c WHERE c.parent_session_id = $1 AND {continuation_sql('c')} LIMIT 1"
)


@handles(ReopenOrphanedCompressionSession)
async def reopen_orphaned_compression_session(conn: Any, cmd: ReopenOrphanedCompressionSession) -> bool:
    row = await conn.fetchrow("SELECT ended_at, end_reason FROM sessions WHERE id = $1", cmd.session_id)
    if row is None or row[0] is None or row[1] != "compression":
        return False
    # Any continuation, open or ended, means the handoff happened; reopening
    # would give the conversation two live heads.
    if await conn.fetchval(_HAS_CONTINUATION_SQL, cmd.session_id) is not None:
        return False
    lease = await conn.fetchrow(
        f"SELECT holder, expires_at, {DB_NOW} FROM compression_locks WHERE session_id = $1 FOR UPDATE", cmd.session_id
    )
    if lease is not None:
        if lease[1] is None or float(lease[1]) >= lease[2]:
            return False
        # Removed in this transaction so its owner cannot refresh it back to life.
        await conn.execute(
            "DELETE FROM compression_locks WHERE session_id = $1 AND holder = $2 AND expires_at = $3",
            cmd.session_id, lease[0], lease[1],
        )
    status = await conn.execute(
        "UPDATE sessions SET ended_at = NULL, end_reason = NULL "
        "WHERE id = $1 AND ended_at IS NOT NULL AND end_reason = 'compression'",
        cmd.session_id,
    )
    return row_count(status) == 1


@handles(FinalizeOrphanedCompressionSessions)
async def finalize_orphaned_compression_sessions(conn: Any, cmd: FinalizeOrphanedCompressionSessions) -> int:
    status = await conn.execute(
        """
        UPDATE sessions SET ended_at = $1, end_reason = 'orphaned_compression'
        WHERE COALESCE(api_call_count, 0) = 0
          AND ended_at IS NULL AND end_reason IS NULL
          AND started_at < $2
          AND parent_session_id IS NOT NULL
          AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = sessions.parent_session_id
                      AND p.end_reason = 'compression' AND p.ended_at IS NOT NULL)
          AND EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = sessions.id)
        """,
        time.time(), cmd.cutoff,
    )
    return row_count(status)


@handles(SetCompressionCooldown)
async def set_compression_cooldown(conn: Any, cmd: SetCompressionCooldown) -> None:
    status = await conn.execute(
        "UPDATE sessions SET compression_failure_cooldown_until = $1, compression_failure_error = $2 WHERE id = $3",
        cmd.cooldown_until, cmd.error, cmd.session_id,
    )
    if cmd.require_row and row_count(status) != 1:
        raise RuntimeError(f"compression cooldown rollback session missing: {cmd.session_id}")


_COUNTER_COLUMNS = ("compression_fallback_streak", "compression_ineffective_count")


@handles(SetCompressionCounter)
async def set_compression_counter(conn: Any, cmd: SetCompressionCounter) -> None:
    if cmd.column not in _COUNTER_COLUMNS:
        raise ValueError(f"unknown compression counter: {cmd.column!r}")
    await conn.execute(f"UPDATE sessions SET {cmd.column} = $1 WHERE id = $2", max(0, cmd.value), cmd.session_id)


@handles(RewindToMessage)
async def rewind_to_message(conn: Any, cmd: RewindToMessage) -> dict[str, Any]:
    await require_fence(conn, cmd.session_id, cmd.fence)
    record = await conn.fetchrow(
        f"SELECT {MESSAGE_SELECT} FROM messages WHERE id = $1 AND session_id = $2",
        cmd.target_message_id, cmd.session_id,
    )
    if record is None:
        raise ValueError(f"message {cmd.target_message_id} not found in session {cmd.session_id}")
    found = message_dict(record)
    # The reference hands display_metadata back as the JSON text the column holds.
    stored_metadata = found.get("display_metadata")
    target = decode_message_row(found)
    target["display_metadata"] = stored_metadata
    if target["role"] != "user":
        raise ValueError(
            f"rewind target must be a 'user' message (got role={target['role']!r}, id={cmd.target_message_id})"
        )
    status = await conn.execute(
        "UPDATE messages SET active = 0 WHERE session_id = $1 AND id >= $2 AND active = 1",
        cmd.session_id, cmd.target_message_id,
    )
    await conn.execute(
        "UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 WHERE id = $1", cmd.session_id
    )
    head = await conn.fetchval("SELECT MAX(id) FROM messages WHERE session_id = $1 AND active = 1", cmd.session_id)
    return {"rewound_count": row_count(status), "target_message": target, "new_head_id": head}


@handles(RestoreRewound)
async def restore_rewound(conn: Any, cmd: RestoreRewound) -> int:
    status = await conn.execute(
        "UPDATE messages SET active = 1 WHERE session_id = $1 AND id >= $2 AND active = 0",
        cmd.session_id, cmd.since_message_id,
    )
    return row_count(status)
