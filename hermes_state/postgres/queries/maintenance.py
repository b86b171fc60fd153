"""Retention, deletion-target, export and storage-size reads: the names and shapes of ``sqlite.queries.maintenance``.

``filters_where`` turns a :class:`~hermes_state.commands.maintenance.SessionFilters`
into SQL; the prune and archive handlers use the same function, so what
``prune_candidates`` shows is exactly what a prune would delete.
"""

from __future__ import annotations

from typing import Any

from ...commands.maintenance import SessionFilters
from ...previews import escape_like
from .core import get_session
from ..lineage_sql import last_active_sql, newest_or_started_sql
from .listing import Params, cwd_prefix_clause, message_rows
from .registry import query

__all__ = ["PRUNE_LAST_ACTIVE", "filters_where"]

# The prune clock: newest message, else start (heartbeats do not keep a session alive).
PRUNE_LAST_ACTIVE = newest_or_started_sql("s")

_TOKENS = "(COALESCE(s.input_tokens, 0)::numeric + COALESCE(s.output_tokens, 0))"
_COST = "COALESCE(s.actual_cost_usd, s.estimated_cost_usd, 0)"

# filter field -> SQL with one ``{}`` for the bound value
_COMPARISONS: dict[str, str] = {
    "last_active_before": f"{PRUNE_LAST_ACTIVE} < {{}}",
    "last_active_after": f"{PRUNE_LAST_ACTIVE} >= {{}}",
    "started_before": "s.started_at < {}",
    "started_after": "s.started_at >= {}",
    "source": "s.source = {}",
    "end_reason": "s.end_reason = {}",
    "user_id": "s.user_id = {}",
    "chat_id": "s.chat_id = {}",
    "chat_type": "s.chat_type = {}",
    "provider": "lower(COALESCE(s.billing_provider, '')) = lower({})",
    "title_like": "lower(COALESCE(s.title, '')) LIKE {} ESCAPE '\\'",
    "model_like": "lower(COALESCE(s.model, '')) LIKE {} ESCAPE '\\'",
    "branch_like": "lower(COALESCE(s.git_branch, '')) LIKE {} ESCAPE '\\'",
    "min_messages": "COALESCE(s.message_count, 0) >= {}",
    "max_messages": "COALESCE(s.message_count, 0) <= {}",
    "min_tokens": f"{_TOKENS} >= {{}}",
    "max_tokens": f"{_TOKENS} <= {{}}",
    "min_cost": f"{_COST} >= {{}}",
    "max_cost": f"{_COST} <= {{}}",
    "min_tool_calls": "COALESCE(s.tool_call_count, 0) >= {}",
    "max_tool_calls": "COALESCE(s.tool_call_count, 0) <= {}",
}


def filters_where(filters: SessionFilters, params: Params, *, ended: bool = True) -> str:
    """SQL (alias ``s``) selecting the ended sessions that match every set filter; values go to ``params``.

    ``ended=False`` inverts only the ended-session guard: the open sessions
    a prune with the same filters skips.
    """
    clauses = ["s.ended_at IS NOT NULL" if ended else "s.ended_at IS NULL"]
    for name, sql in _COMPARISONS.items():
        value = getattr(filters, name)
        if value is None or value == "":
            continue
        if name.endswith("_like"):
            value = f"%{escape_like(value.lower())}%"
        clauses.append(sql.format(params.add(value)))
    if filters.cwd_prefix:
        clauses.append(cwd_prefix_clause(filters.cwd_prefix, params))
    if filters.archived is not None:
        clauses.append(f"s.archived = {params.add(1 if filters.archived else 0)}")
    return " AND ".join(clauses)


@query
async def prune_candidates(conn: Any, filters: SessionFilters) -> list[dict[str, Any]]:
    params = Params()
    where = filters_where(filters, params)
    rows = await conn.fetch(
        f"SELECT s.id, s.source, s.title, s.model, s.started_at, {PRUNE_LAST_ACTIVE} AS last_active, "
        f"s.ended_at, s.message_count, s.archived FROM sessions AS s WHERE {where} "
        "ORDER BY last_active, s.started_at, s.id",
        *params.values,
    )
    return [dict(r) for r in rows]


@query
async def open_prune_match_count(conn: Any, filters: SessionFilters) -> int:
    params = Params()
    where = filters_where(filters, params, ended=False)
    return int(await conn.fetchval(f"SELECT COUNT(*) FROM sessions AS s WHERE {where}", *params.values))


@query
async def session_delete_targets(conn: Any, session_id: str) -> list[str]:
    # Imported here: the handler package imports this one at load time.
    from ..handlers.sessions import delete_targets

    return await delete_targets(conn, session_id)


# ----------------------------------------------------------------------- export

_EXPORT_SESSION_SQL = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt, "
    f"{last_active_sql('s')} AS last_active "
    "FROM sessions AS s LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash"
)


@query
async def active_message_count(conn: Any, session_id: str, bound: int | None) -> int:
    """Active rows of the session, counting at most ``bound`` of them (all when None)."""
    if bound is None:
        return int(await conn.fetchval("SELECT COUNT(*) FROM messages WHERE session_id = $1 AND active = 1", session_id))
    return int(
        await conn.fetchval(
            "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = $1 AND active = 1 LIMIT $2) AS bounded",
            session_id, bound,
        )
    )


@query
async def export_session_data(conn: Any, session_id: str, bound: int | None) -> tuple[dict[str, Any] | None, int]:
    """``(session + "messages", active count)`` in one snapshot; ``(None, count)`` over ``bound``, ``(None, 0)`` unknown."""
    session = await get_session(conn, session_id)
    if session is None:
        return None, 0
    count = await active_message_count(conn, session_id, None if bound is None else bound + 1)
    if bound is not None and count > bound:
        return None, count
    session["messages"] = await message_rows(conn, "WHERE session_id = $1 AND active = 1 ORDER BY id", session_id)
    return session, count


@query
async def export_sessions_page(
    conn: Any, source: str | None, after: tuple[float, str] | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` sessions (``get_session`` shape + ``last_active``) after the keyset ``after``, newest first."""
    params = Params()
    where: list[str] = []
    if source:
        where.append(f"s.source = {params.add(source)}")
    if after is not None:
        where.append(f"(s.started_at, s.id) < ({params.add(after[0])}::float8, {params.add(after[1])}::text)")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    records = await conn.fetch(
        f"{_EXPORT_SESSION_SQL} {clause} ORDER BY s.started_at DESC, s.id DESC LIMIT {params.add(limit)}",
        *params.values,
    )
    rows = []
    for record in records:
        row = dict(record)
        row["system_prompt"] = row.pop("_resolved_prompt")
        rows.append(row)
    return rows


@query
async def export_messages_page(conn: Any, session_id: str, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` active rows of the session with ``id > after_id``, decoded, in id order."""
    return await message_rows(
        conn, "WHERE session_id = $1 AND active = 1 AND id > $2 ORDER BY id LIMIT $3", session_id, after_id, limit
    )


@query
async def logical_size(conn: Any) -> int | None:
    """Bytes the store's tables (with their indexes and TOAST) take in the current schema."""
    value = await conn.fetchval(
        "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class AS c "
        "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
    )
    return None if value is None else int(value)
