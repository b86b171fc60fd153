"""Read queries for retention (prune/archive candidates), deletion targets, export and storage size.

``filters_where`` turns a :class:`~hermes_state.commands.maintenance.SessionFilters`
into SQL; the prune and archive handlers use the same function, so what
``list_prune_candidates`` shows is exactly what a prune would delete.
"""

from __future__ import annotations

from typing import Any

from ...commands.maintenance import SessionFilters
from ...encoding import decode_message_row
from .compression import last_active_sql
from .core import fetch_dicts, get_session, snapshot
from .listing import cwd_prefix_clause, escape_like, newest_or_started_sql
from .registry import query

__all__ = ["PRUNE_LAST_ACTIVE", "filters_where"]

# The prune clock: newest message, else start (heartbeats do not keep a session alive).
PRUNE_LAST_ACTIVE = newest_or_started_sql("s")

_TOKENS = "(COALESCE(s.input_tokens, 0) + COALESCE(s.output_tokens, 0))"
_COST = "COALESCE(s.actual_cost_usd, s.estimated_cost_usd, 0)"

# filter field -> (SQL with one placeholder, how the value is bound)
_COMPARISONS: dict[str, str] = {
    "last_active_before": f"{PRUNE_LAST_ACTIVE} < ?",
    "last_active_after": f"{PRUNE_LAST_ACTIVE} >= ?",
    "started_before": "s.started_at < ?",
    "started_after": "s.started_at >= ?",
    "source": "s.source = ?",
    "end_reason": "s.end_reason = ?",
    "user_id": "s.user_id = ?",
    "chat_id": "s.chat_id = ?",
    "chat_type": "s.chat_type = ?",
    "provider": "lower(COALESCE(s.billing_provider, '')) = lower(?)",
    "title_like": "lower(COALESCE(s.title, '')) LIKE ? ESCAPE '\\'",
    "model_like": "lower(COALESCE(s.model, '')) LIKE ? ESCAPE '\\'",
    "branch_like": "lower(COALESCE(s.git_branch, '')) LIKE ? ESCAPE '\\'",
    "min_messages": "COALESCE(s.message_count, 0) >= ?",
    "max_messages": "COALESCE(s.message_count, 0) <= ?",
    "min_tokens": f"{_TOKENS} >= ?",
    "max_tokens": f"{_TOKENS} <= ?",
    "min_cost": f"{_COST} >= ?",
    "max_cost": f"{_COST} <= ?",
    "min_tool_calls": "COALESCE(s.tool_call_count, 0) >= ?",
    "max_tool_calls": "COALESCE(s.tool_call_count, 0) <= ?",
}


def filters_where(filters: SessionFilters, *, ended: bool = True) -> tuple[str, list[Any]]:
    """SQL (alias ``s``) selecting the ended sessions that match every set filter.

    ``ended=False`` inverts only the ended-session guard: the open sessions
    a prune with the same filters skips.
    """
    clauses = ["s.ended_at IS NOT NULL" if ended else "s.ended_at IS NULL"]
    params: list[Any] = []
    for name, sql in _COMPARISONS.items():
        value = getattr(filters, name)
        if value is None or value == "":
            continue
        if name.endswith("_like"):
            value = f"%{escape_like(value.lower())}%"
        clauses.append(sql)
        params.append(value)
    if filters.cwd_prefix:
        clause, values = cwd_prefix_clause(filters.cwd_prefix)
        clauses.append(clause)
        params.extend(values)
    if filters.archived is not None:
        clauses.append("s.archived = ?")
        params.append(1 if filters.archived else 0)
    return " AND ".join(clauses), params


@query
def prune_candidates(conn: Any, filters: SessionFilters) -> list[dict[str, Any]]:
    where, params = filters_where(filters)
    return fetch_dicts(
        conn,
        f"SELECT s.id, s.source, s.title, s.model, s.started_at, {PRUNE_LAST_ACTIVE} AS last_active, "
        f"s.ended_at, s.message_count, s.archived FROM sessions AS s WHERE {where} "
        "ORDER BY last_active, s.started_at, s.id",
        params,
    )


@query
def open_prune_match_count(conn: Any, filters: SessionFilters) -> int:
    where, params = filters_where(filters, ended=False)
    return int(conn.execute(f"SELECT COUNT(*) FROM sessions AS s WHERE {where}", params).fetchone()[0])


@query
def session_delete_targets(conn: Any, session_id: str) -> list[str]:
    # Imported here: handler modules import this package, so it cannot import them at load time.
    from ..handlers.sessions import delete_targets

    with snapshot(conn):
        return delete_targets(conn, session_id)


# ----------------------------------------------------------------------- export

_EXPORT_SESSION_SQL = (
    "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt, "
    f"{last_active_sql('s')} AS last_active "
    "FROM sessions AS s LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash"
)


@query
def active_message_count(conn: Any, session_id: str, bound: int | None) -> int:
    """Active rows of the session, counting at most ``bound`` of them (all when None)."""
    params: tuple[Any, ...]
    if bound is None:
        sql, params = "SELECT COUNT(*) FROM messages WHERE session_id = ? AND active = 1", (session_id,)
    else:
        sql = "SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE session_id = ? AND active = 1 LIMIT ?)"
        params = (session_id, bound)
    return int(conn.execute(sql, params).fetchone()[0])


@query
def export_session_data(conn: Any, session_id: str, bound: int | None) -> tuple[dict[str, Any] | None, int]:
    """``(session + "messages", active count)`` in one snapshot.

    When the session has more than ``bound`` active rows the messages are
    not read and the result is ``(None, count)``; an unknown id is ``(None, 0)``.
    """
    with snapshot(conn):
        session = get_session(conn, session_id)
        if session is None:
            return None, 0
        count = active_message_count(conn, session_id, None if bound is None else bound + 1)
        if bound is not None and count > bound:
            return None, count
        rows = fetch_dicts(conn, "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id", (session_id,))
        session["messages"] = [decode_message_row(r) for r in rows]
        return session, count


@query
def export_sessions_page(
    conn: Any, source: str | None, after: tuple[float, str] | None, limit: int
) -> list[dict[str, Any]]:
    """Up to ``limit`` sessions (``get_session`` shape + ``last_active``) after the keyset ``after``.

    Pages go newest ``started_at`` first; ``started_at`` never changes, so
    a session cannot move across the cursor while an export runs.
    """
    where: list[str] = []
    params: list[Any] = []
    if source:
        where.append("s.source = ?")
        params.append(source)
    if after is not None:
        where.append("(s.started_at, s.id) < (?, ?)")
        params.extend(after)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = fetch_dicts(
        conn, f"{_EXPORT_SESSION_SQL} {clause} ORDER BY s.started_at DESC, s.id DESC LIMIT ?", [*params, limit]
    )
    for row in rows:
        row["system_prompt"] = row.pop("_resolved_prompt")
    return rows


@query
def export_messages_page(conn: Any, session_id: str, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` active rows of the session with ``id > after_id``, decoded, in id order."""
    rows = fetch_dicts(
        conn,
        "SELECT * FROM messages WHERE session_id = ? AND active = 1 AND id > ? ORDER BY id LIMIT ?",
        (session_id, after_id, limit),
    )
    return [decode_message_row(r) for r in rows]


@query
def logical_size(conn: Any) -> int | None:
    pages = conn.execute("PRAGMA page_count").fetchone()
    size = conn.execute("PRAGMA page_size").fetchone()
    if pages is None or size is None:
        return None
    return int(pages[0]) * int(size[0])
