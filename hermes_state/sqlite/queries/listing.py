"""Read queries behind the listing, counting and message-navigation helpers.

``list_sessions_rich`` and friends build "rich" session rows: every
``sessions`` column (prompt resolved), ``last_active`` and a short
``preview`` of the first user turn. A multi-statement read runs inside one
read transaction (``snapshot``) so the page, the pinned rows and the
projected compression tips all come from the same committed state.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ...encoding import JSON_CONTENT_PREFIX, decode_content, decode_message_row
from ...limits import INT64_MAX
from ...previews import (  # noqa: F401  (re-exported: handlers and maintenance import them from here)
    PREVIEW_HEAD,
    PREVIEW_SKILL_WINDOW,
    SKILL_INVOCATION_PREFIX,
    describe_skill_invocation,
    escape_like,
    parse_model_config,
    project_tips,
    shape_preview,
    text_preview,
)
from .compression import compression_tip, continuation_sql, last_active_sql, marker_sql
from .core import fetch_dicts, snapshot
from .registry import query

__all__ = [
    "compact_session_columns",
    "cwd_prefix_clause",
    "describe_skill_invocation",
    "escape_like",
    "newest_or_started_sql",
    "shape_preview",
    "text_preview",
]

# ------------------------------------------------------------------ SQL pieces


def newest_or_started_sql(alias: str) -> str:
    """Newest message timestamp, else ``started_at`` (a clock that ignores activity heartbeats)."""
    return f"COALESCE((SELECT MAX(nm.timestamp) FROM messages AS nm WHERE nm.session_id = {alias}.id), {alias}.started_at)"


def cwd_prefix_clause(prefix: str, alias: str = "s") -> tuple[str, list[str]]:
    """``cwd`` equal to the prefix (trailing separators ignored) or below it, for / and \\ paths."""
    base = prefix.rstrip("/\\") or prefix
    escaped = escape_like(base)
    return (
        f"({alias}.cwd = ? OR {alias}.cwd LIKE ? ESCAPE '\\' OR {alias}.cwd LIKE ? ESCAPE '\\')",
        [base, f"{escaped}/%", f"{escaped}\\\\%"],
    )


@functools.cache
def listable_sql(alias: str = "s") -> str:
    """Rows a session picker shows: roots, /branch children and reset children, never delegates."""
    # Imported here: handler modules import this one, so it must not import them at load time.
    from ..handlers.sessions import RESET_REASONS

    reasons = ", ".join(f"'{reason}'" for reason in RESET_REASONS)
    a = alias
    branch = (
        f"{marker_sql(a, '_branched_from')} IS NOT NULL"
        f" OR EXISTS (SELECT 1 FROM sessions AS bp WHERE bp.id = {a}.parent_session_id"
        f" AND bp.end_reason = 'branched' AND {a}.started_at >= bp.ended_at)"
    )
    reset = (
        f"{marker_sql(a, '_reset_from')} IS NOT NULL"
        f" OR (COALESCE({a}.session_key, '') <> '' AND EXISTS (SELECT 1 FROM sessions AS rp"
        f" WHERE rp.id = {a}.parent_session_id AND rp.end_reason IN ({reasons})"
        f" AND rp.session_key = {a}.session_key))"
    )
    return (
        f"(({a}.parent_session_id IS NULL OR {branch} OR {reset})"
        f" AND {marker_sql(a, '_delegate_from')} IS NULL)"
    )


# A session's cost as the lists show it: the actual cost when one was recorded, else the estimate.
SESSION_COST_SQL = "COALESCE(NULLIF(s.actual_cost_usd, 0), s.estimated_cost_usd, 0)"
# ``list_sessions_rich(sort=...)``: each order ends with the default one, so pages are stable.
SESSION_ORDER = {
    "started": "s.started_at DESC, s.id DESC",
    "cost": f"{SESSION_COST_SQL} DESC, s.started_at DESC, s.id DESC",
    "messages": "s.message_count DESC, s.started_at DESC, s.id DESC",
}


def session_filters(opts: dict[str, Any], *, listable: bool) -> tuple[list[str], list[Any]]:
    """WHERE clauses shared by ``list_sessions_rich`` and ``session_count`` (alias ``s``)."""
    where: list[str] = []
    params: list[Any] = []
    if listable:
        where.append(listable_sql("s"))
    wanted = [opts["source"]] if opts.get("source") else list(opts.get("sources") or [])
    if wanted:
        where.append(f"s.source IN ({', '.join('?' * len(wanted))})")
        params.extend(wanted)
    if opts.get("session_key"):
        where.append("s.session_key = ?")
        params.append(opts["session_key"])
    excluded = list(opts.get("exclude_sources") or [])
    if excluded:
        where.append(f"s.source NOT IN ({', '.join('?' * len(excluded))})")
        params.extend(excluded)
    if opts.get("cwd_prefix"):
        clause, values = cwd_prefix_clause(opts["cwd_prefix"])
        where.append(clause)
        params.extend(values)
    if (opts.get("min_message_count") or 0) > 0:
        where.append("s.message_count >= ?")
        params.append(opts["min_message_count"])
    if opts.get("archived_only"):
        where.append("s.archived = 1")
    elif not opts.get("include_archived"):
        where.append("s.archived = 0")
    if opts.get("exclude_hidden"):
        where.append("s.hidden = 0")
    if opts.get("pinned_only"):
        where.append("s.pinned = 1")
    if opts.get("started_after") is not None:
        where.append("s.started_at >= ?")
        params.append(opts["started_after"])
    if opts.get("started_before") is not None:
        where.append("s.started_at < ?")
        params.append(opts["started_before"])
    if opts.get("model"):
        where.append("s.model = ?")
        params.append(opts["model"])
    if opts.get("tool_name"):
        where.append("EXISTS (SELECT 1 FROM messages AS tm WHERE tm.session_id = s.id AND tm.tool_name = ?)")
        params.append(opts["tool_name"])
    if opts.get("min_cost") is not None:
        where.append(f"{SESSION_COST_SQL} >= ?")
        params.append(opts["min_cost"])
    return where, params


def _where(clauses: Sequence[str]) -> str:
    return f"WHERE {' AND '.join(clauses)}" if clauses else ""


_FLAT = "replace(replace(pm.content, char(10), ' '), char(13), ' ')"
_JSON_HEAD = "X'" + JSON_CONTENT_PREFIX.encode().hex() + "'"
_PREVIEW_SQL = f"""COALESCE((
    SELECT CASE
        WHEN substr(CAST(pm.content AS BLOB), 1, {len(JSON_CONTENT_PREFIX)}) = {_JSON_HEAD}
            THEN CAST(substr(CAST(pm.content AS BLOB), 1, 16000) AS TEXT)
        WHEN substr(pm.content, 1, {len(SKILL_INVOCATION_PREFIX)}) = '{SKILL_INVOCATION_PREFIX}' THEN
            CASE WHEN length(pm.content) > {2 * PREVIEW_SKILL_WINDOW}
                 THEN substr({_FLAT}, 1, {PREVIEW_SKILL_WINDOW}) || char(30) || substr({_FLAT}, -{PREVIEW_SKILL_WINDOW})
                 ELSE substr({_FLAT}, 1, {2 * PREVIEW_SKILL_WINDOW}) END
        ELSE substr({_FLAT}, 1, {PREVIEW_HEAD})
    END
    FROM messages AS pm
    WHERE pm.session_id = s.id AND pm.role = 'user' AND pm.content IS NOT NULL
    ORDER BY pm.timestamp, pm.id LIMIT 1), '')"""


# ------------------------------------------------------------------ rich rows


@functools.cache
def compact_session_columns() -> tuple[str, ...]:
    """Declared ``sessions`` columns in order, without ``system_prompt`` and ``system_prompt_hash``."""
    from ..schema import SCHEMA_SQL

    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(SCHEMA_SQL)
        names = [row[1] for row in mem.execute("PRAGMA table_info(sessions)")]
    finally:
        mem.close()
    return tuple(n for n in names if n not in ("system_prompt", "system_prompt_hash"))


def _rich_select(compact: bool, *, with_heartbeat: bool = True, rows: str = "sessions AS s") -> str:
    """``SELECT`` of rich-row columns over ``rows`` (which must expose the session as ``s``)."""
    if compact:
        columns = ", ".join(f"s.{c}" for c in compact_session_columns())
        join = ""
    else:
        columns = "s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt"
        join = "LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash"
    return (
        f"SELECT {columns}, {_PREVIEW_SQL} AS _preview_raw, "
        f"{last_active_sql('s') if with_heartbeat else newest_or_started_sql('s')} AS last_active "
        f"FROM {rows} {join}"
    )


def _finish_rich_row(row: dict[str, Any]) -> dict[str, Any]:
    if "_resolved_prompt" in row:
        row["system_prompt"] = row.pop("_resolved_prompt")
    row["preview"] = shape_preview(row.pop("_preview_raw"))
    return row


def rich_rows(conn: Any, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Run a ``_rich_select`` statement and shape its rows."""
    return [_finish_rich_row(r) for r in fetch_dicts(conn, sql, params)]


def rich_rows_by_id(conn: Any, ids: Iterable[str], compact: bool) -> dict[str, dict[str, Any]]:
    """Rich rows for ``ids`` keyed by id (unknown ids are absent)."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        sql = f"{_rich_select(compact)} WHERE s.id IN ({', '.join('?' * len(chunk))})"
        for row in rich_rows(conn, sql, chunk):
            found[row["id"]] = row
    return found


def _project_tips(conn: Any, rows: list[dict[str, Any]], compact: bool) -> list[dict[str, Any]]:
    tips = {r["id"]: compression_tip(conn, r["id"]) for r in rows if r.get("end_reason") == "compression"}
    tips = {root: tip for root, tip in tips.items() if tip != root}
    if not tips:
        return rows
    return project_tips(rows, tips, rich_rows_by_id(conn, tips.values(), compact))


def _chain_query(opts: dict[str, Any], base: list[str], base_params: list[Any]) -> tuple[str, list[Any]]:
    """The ``order_by_last_active`` page: rows ranked by the freshest member of their compression chain."""
    filters: list[str] = []
    filter_params: list[Any] = []
    id_needle = (opts.get("id_query") or "").strip().lower()
    search_needle = (opts.get("search_query") or "").strip().lower()
    if id_needle:
        filters.append(
            "EXISTS (SELECT 1 FROM chain AS cq WHERE cq.root_id = s.id AND lower(cq.cur_id) LIKE ? ESCAPE '\\')"
        )
        filter_params.append(f"%{escape_like(id_needle)}%")
    if search_needle:
        squashed = re.sub(r"[\W_]+", "", search_needle)
        title = "lower(COALESCE(cs.title, ''))"
        match = [f"{title} LIKE ? ESCAPE '\\'", "lower(cq.cur_id) LIKE ? ESCAPE '\\'"]
        filter_params.extend([f"%{escape_like(search_needle)}%"] * 2)
        if squashed:
            stripped = f"replace(replace(replace(replace({title}, '-', ''), '_', ''), '.', ''), ' ', '')"
            match.append(f"{stripped} LIKE ? ESCAPE '\\'")
            filter_params.append(f"%{escape_like(squashed)}%")
        filters.append(
            "EXISTS (SELECT 1 FROM chain AS cq JOIN sessions AS cs ON cs.id = cq.cur_id "
            f"WHERE cq.root_id = s.id AND ({' OR '.join(match)}))"
        )
    sql = f"""
WITH RECURSIVE chain(root_id, cur_id, cur_end, active, depth) AS (
    SELECT s.id, s.id, s.end_reason, {last_active_sql('s')}, 0 FROM sessions AS s {_where(base)}
    UNION ALL
    SELECT chain.root_id, c.id, c.end_reason, {last_active_sql('c')}, chain.depth + 1 FROM chain
    JOIN sessions AS c ON c.parent_session_id = chain.cur_id
    WHERE chain.cur_end = 'compression' AND {continuation_sql('c')} AND chain.depth < 100
),
chain_max(root_id, freshest) AS (
    SELECT root_id, MAX(active) FROM chain GROUP BY root_id
),
page(id, freshest) AS (
    SELECT s.id, COALESCE(cm.freshest, s.started_at) FROM chain_max AS cm
    JOIN sessions AS s ON s.id = cm.root_id
    {_where(filters)}
    ORDER BY 2 DESC, s.started_at DESC, s.id DESC
    LIMIT ? OFFSET ?
)
{_rich_select(bool(opts.get('compact_rows')), rows="page JOIN sessions AS s ON s.id = page.id")}
ORDER BY page.freshest DESC, s.started_at DESC, s.id DESC
"""
    return sql, [*base_params, *filter_params, opts["limit"], opts["offset"]]


@query
def list_sessions_rich(conn: Any, opts: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``list_sessions_rich`` page (see the facade for the option meanings)."""
    compact = bool(opts.get("compact_rows"))
    include_children = bool(opts.get("include_children"))
    base, base_params = session_filters(opts, listable=not include_children)
    with snapshot(conn):
        if opts.get("order_by_last_active"):
            sql, params = _chain_query(opts, base, base_params)
        else:
            # Page the ids first, so previews and activity are computed for the page only.
            order = SESSION_ORDER[opts.get("sort") or "started"]
            page = (
                f"(SELECT s.id FROM sessions AS s {_where(base)} ORDER BY {order} "
                "LIMIT ? OFFSET ?) AS page JOIN sessions AS s ON s.id = page.id"
            )
            sql = f"{_rich_select(compact, rows=page)} ORDER BY {order}"
            params = [*base_params, opts["limit"], opts["offset"]]
        rows = rich_rows(conn, sql, params)
        if opts.get("include_pinned"):
            seen = {r["id"] for r in rows}
            pinned_sql = (
                f"{_rich_select(compact, with_heartbeat=False)} {_where([*base, 's.pinned = 1'])} "
                "ORDER BY s.started_at DESC, s.id DESC"
            )
            rows.extend(r for r in rich_rows(conn, pinned_sql, base_params) if r["id"] not in seen)
        if opts.get("project_compression_tips", True) and not include_children:
            rows = _project_tips(conn, rows, compact)
    return rows


@query
def session_rich_row(conn: Any, session_id: str, compact: bool) -> dict[str, Any] | None:
    return rich_rows_by_id(conn, [session_id], compact).get(session_id)


# --------------------------------------------------------------------- counters


@query
def count_sessions(conn: Any, opts: dict[str, Any]) -> int:
    where, params = session_filters(opts, listable=bool(opts.get("exclude_children")))
    return int(conn.execute(f"SELECT COUNT(*) FROM sessions AS s {_where(where)}", params).fetchone()[0])


@query
def count_sessions_by_source(conn: Any, opts: dict[str, Any]) -> dict[str, int]:
    where, params = session_filters(opts, listable=bool(opts.get("exclude_children")))
    label = "COALESCE(NULLIF(s.source, ''), 'cli')"
    rows = conn.execute(
        f"SELECT {label} AS src, COUNT(*) AS n FROM sessions AS s {_where(where)} GROUP BY src ORDER BY n DESC, src",
        params,
    ).fetchall()
    return {str(src): int(n) for src, n in rows}


@query
def sessions_at_least(conn: Any, n: int) -> bool:
    if n <= 0:
        return True
    return len(conn.execute("SELECT 1 FROM sessions LIMIT ?", (n,)).fetchall()) >= n


@query
def count_empty_sessions(conn: Any) -> int:
    return int(
        conn.execute(
            "SELECT COUNT(*) FROM sessions WHERE message_count = 0 AND ended_at IS NOT NULL AND archived = 0"
        ).fetchone()[0]
    )


@query
def distinct_session_cwds(conn: Any, include_archived: bool) -> list[dict[str, Any]]:
    archived = "" if include_archived else " AND archived = 0"
    rows = conn.execute(
        "SELECT cwd, COUNT(*), MAX(COALESCE(ended_at, started_at, 0)) FROM sessions "
        f"WHERE cwd IS NOT NULL AND trim(cwd) <> ''{archived} GROUP BY cwd ORDER BY cwd"
    ).fetchall()
    return [{"cwd": cwd, "sessions": int(n or 0), "last_active": float(last or 0)} for cwd, n, last in rows]


# --------------------------------------------------------------- session reads


def _prefix_bound(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (None when there is none)."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF or 0xD7FF <= last < 0xE000:
        return None
    return prefix[:-1] + chr(last + 1)


@query
def resolve_session_id(conn: Any, prefix: str) -> str | None:
    """The exact id, else the one id starting with ``prefix``; None for no match or several."""
    with snapshot(conn):
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (prefix,)).fetchone():
            return prefix
        bound = _prefix_bound(prefix)
        upper, params = ("AND id < ?", [bound]) if bound is not None else ("", [])
        rows = conn.execute(
            f"SELECT id FROM sessions WHERE id >= ? {upper} AND substr(id, 1, ?) = ? LIMIT 2",
            [prefix, *params, len(prefix), prefix],
        ).fetchall()
    return rows[0][0] if len(rows) == 1 else None


@query
def skill_scaffolded_sessions(conn: Any, limit: int) -> list[dict[str, Any]]:
    return fetch_dicts(
        conn,
        """
        SELECT s.id, s.title, m.content FROM sessions AS s
        JOIN messages AS m ON m.id = (
            SELECT fm.id FROM messages AS fm
            WHERE fm.session_id = s.id AND fm.role = 'user' AND fm.content IS NOT NULL
            ORDER BY fm.timestamp, fm.id LIMIT 1)
        WHERE s.title IS NOT NULL AND substr(m.content, 1, ?) = ?
        ORDER BY s.started_at DESC, s.id DESC LIMIT ?
        """,
        (len(SKILL_INVOCATION_PREFIX), SKILL_INVOCATION_PREFIX, limit),
    )


@query
def first_assistant_text(conn: Any, session_id: str) -> str:
    row = conn.execute(
        "SELECT content FROM messages WHERE session_id = ? AND role = 'assistant' AND content IS NOT NULL "
        "ORDER BY timestamp, id LIMIT 1",
        (session_id,),
    ).fetchone()
    decoded = decode_content(row[0]) if row else None
    return decoded if isinstance(decoded, str) else ""


@query
def session_model_config(conn: Any, session_id: str) -> tuple[bool, str | None]:
    """``(session exists, stored model_config text)``."""
    row = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return (False, None) if row is None else (True, row[0])


@query
def session_activity_row(conn: Any, session_id: str) -> tuple[Any, Any, Any] | None:
    """``(last_activity_at, description, provenance)`` or None for an unknown session."""
    row = conn.execute(
        "SELECT last_activity_at, last_activity_description, last_activity_provenance FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    return None if row is None else (row[0], row[1], row[2])


# ------------------------------------------------------------------- messages


def _message_rows(conn: Any, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    return [decode_message_row(r) for r in fetch_dicts(conn, sql, params)]


def _around(conn: Any, session_id: str, anchor: int, window: int) -> dict[str, Any]:
    if conn.execute("SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (anchor, session_id)).fetchone() is None:
        return {"window": [], "messages_before": 0, "messages_after": 0}
    before = _message_rows(
        conn, "SELECT * FROM messages WHERE session_id = ? AND id <= ? ORDER BY id DESC LIMIT ?",
        (session_id, anchor, min(window, INT64_MAX - 1) + 1),
    )
    after = _message_rows(
        conn, "SELECT * FROM messages WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
        (session_id, anchor, window),
    )
    before.reverse()
    return {"window": before + after, "messages_before": len(before) - 1, "messages_after": len(after)}


@query
def messages_around(conn: Any, session_id: str, anchor: int, window: int) -> dict[str, Any]:
    with snapshot(conn):
        return _around(conn, session_id, anchor, window)


@query
def anchored_view(
    conn: Any, session_id: str, anchor: int, window: int, bookend: int, keep_roles: tuple[str, ...] | None
) -> dict[str, Any]:
    with snapshot(conn):
        view = _around(conn, session_id, anchor, window)
        rows = view["window"]
        view["bookend_start"], view["bookend_end"] = [], []
        if not rows:
            return view
        if keep_roles is not None:
            view["window"] = [r for r in rows if r["id"] == anchor or r["role"] in keep_roles]
        if bookend:
            roles, role_params = "", []
            if keep_roles is not None:
                roles = f" AND role IN ({', '.join('?' * len(keep_roles))})"
                role_params = list(keep_roles)
            tail = f"{roles} AND length(content) > 0"
            view["bookend_start"] = _message_rows(
                conn, f"SELECT * FROM messages WHERE session_id = ? AND id < ?{tail} ORDER BY id LIMIT ?",
                (session_id, rows[0]["id"], *role_params, bookend),
            )
            end = _message_rows(
                conn, f"SELECT * FROM messages WHERE session_id = ? AND id > ?{tail} ORDER BY id DESC LIMIT ?",
                (session_id, rows[-1]["id"], *role_params, bookend),
            )
            end.reverse()
            view["bookend_end"] = end
        return view


@query
def recent_user_messages(conn: Any, session_id: str, limit: int, include_inactive: bool) -> list[dict[str, Any]]:
    active = "" if include_inactive else " AND active = 1"
    rows = conn.execute(
        f"SELECT id, timestamp, content FROM messages WHERE session_id = ? AND role = 'user'{active} "
        "AND COALESCE(display_kind, '') = '' ORDER BY id DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    return [{"id": i, "timestamp": ts, "preview": text_preview(decode_content(c))} for i, ts, c in rows]


@query
def latest_message_row_id(conn: Any, session_id: str, role: str, offset: int, require_text: bool) -> int | None:
    text = " AND content IS NOT NULL AND trim(content) <> ''" if require_text else ""
    row = conn.execute(
        f"SELECT id FROM messages WHERE session_id = ? AND role = ? AND active = 1{text} "
        "ORDER BY id DESC LIMIT 1 OFFSET ?",
        (session_id, role, offset),
    ).fetchone()
    return None if row is None else int(row[0])


@query
def message_role(conn: Any, session_id: str, row_id: int) -> str | None:
    row = conn.execute(
        "SELECT role FROM messages WHERE id = ? AND session_id = ? AND active = 1", (row_id, session_id)
    ).fetchone()
    return None if row is None else row[0]


@query
def has_inactive_messages(conn: Any, session_id: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM messages WHERE session_id = ? AND active = 0 LIMIT 1", (session_id,)
    ).fetchone() is not None


@query
def has_platform_message(conn: Any, session_id: str, platform_message_id: str) -> bool:
    return conn.execute(
        "SELECT 1 FROM messages WHERE session_id = ? AND platform_message_id = ? LIMIT 1",
        (session_id, platform_message_id),
    ).fetchone() is not None
