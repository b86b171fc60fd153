"""Handlers for session titles and lineage-wide flags (the rules of ``sqlite.handlers.titles``).

Two worker processes may set the same title at once. Each first takes a
transaction advisory lock on the title, so the second waits for the first
to commit, then sees its row and fails with the same ``ValueError`` as on
SQLite instead of tripping the unique index with an ``IntegrityError``.
"""

from __future__ import annotations

from typing import Any

from ...commands.titles import SetLineageFlag, SetSessionTitle, SetSessionTitleSource
from ...rules import TITLE_RANK, title_rank
from ..lineage_sql import lineage_ids_cte
from ..conversations import same_conversation_sql
from .common import row_count
from .registry import handles

# Advisory lock class for titles (the first key of the two-key form).
_TITLE_LOCK_CLASS = 0x48547469  # "HTti"


async def _is_compression_ancestor(conn: Any, ancestor_id: str, session_id: str) -> bool:
    found = await conn.fetchval(
        lineage_ids_cte("$1") + "SELECT 1 FROM ancestors WHERE id = $2 AND id <> $1", session_id, ancestor_id
    )
    return found is not None


@handles(SetSessionTitle)
async def set_session_title(conn: Any, cmd: SetSessionTitle) -> bool:
    current = await conn.fetchrow("SELECT title, title_source FROM sessions WHERE id = $1", cmd.session_id)
    if current is None:
        return False
    title, source = current
    if cmd.source != "user" and title is not None and title_rank(source) >= TITLE_RANK[cmd.source]:
        return False
    if cmd.title is not None:
        await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _TITLE_LOCK_CLASS, cmd.title)
        holder = await conn.fetchval("SELECT id FROM sessions WHERE title = $1 AND id <> $2", cmd.title, cmd.session_id)
        if holder is not None:
            if not await _is_compression_ancestor(conn, holder, cmd.session_id):
                raise ValueError(f"Title '{cmd.title}' is already in use by session {holder}")
            # A compressed ancestor hands its title on to the live continuation.
            await conn.execute("UPDATE sessions SET title = NULL, title_source = NULL WHERE id = $1", holder)
    status = await conn.execute(
        "UPDATE sessions SET title = $1, title_source = $2 WHERE id = $3 "
        "AND title IS NOT DISTINCT FROM $4 AND title_source IS NOT DISTINCT FROM $5",
        cmd.title, cmd.source if cmd.title is not None else None, cmd.session_id, title, source,
    )
    return row_count(status) > 0


@handles(SetSessionTitleSource)
async def set_session_title_source(conn: Any, cmd: SetSessionTitleSource) -> bool:
    status = await conn.execute(
        "UPDATE sessions SET title_source = $1 WHERE id = $2 AND title IS NOT NULL", cmd.source, cmd.session_id
    )
    return row_count(status) > 0


_FLAG_COLUMNS = ("archived", "pinned", "hidden", "last_read_at")


@handles(SetLineageFlag)
async def set_lineage_flag(conn: Any, cmd: SetLineageFlag) -> int:
    if cmd.column not in _FLAG_COLUMNS:
        raise ValueError(f"not a lineage flag: {cmd.column!r}")
    value = cmd.value if cmd.column == "last_read_at" else int(cmd.value)
    status = await conn.execute(
        f"UPDATE sessions SET {cmd.column} = $2 WHERE {same_conversation_sql('$1')}",
        cmd.session_id, value,
    )
    return row_count(status)
