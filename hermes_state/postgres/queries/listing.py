"""Listing, counting and message-navigation reads: the names and result shapes of ``sqlite.queries.listing``.

Every query already runs in one REPEATABLE READ snapshot (see ``registry``),
so a page, its pinned rows and the projected compression tips agree. The
preview of a session's first user turn is cut in SQL (only the excerpt
crosses the wire) and shaped by the helpers SQLite uses (``previews``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ...encoding import JSON_CONTENT_PREFIX, decode_content, decode_message_row
from ...limits import INT64_MAX
from ...previews import (
    PREVIEW_HEAD,
    PREVIEW_SKILL_WINDOW,
    SKILL_INVOCATION_PREFIX,
    escape_like,
    project_tips,
    shape_preview,
    text_preview,
)
from ...rules import RESET_REASONS
from ..content import BYTES, JSON, NUL_TEXT
from ..schema import TABLES
from .core import MESSAGE_SELECT, message_dict
from ..lineage_sql import compression_tip, continuation_sql, last_active_sql, marker_sql, newest_or_started_sql
from .registry import query

__all__ = ["COMPACT_SESSION_COLUMNS", "Params", "content_present_sql", "cwd_prefix_clause", "listable_sql"]

# ``sessions`` columns without the prompt pair, in table order (SQLite's compact rows).
COMPACT_SESSION_COLUMNS = tuple(
    name for name, _ in TABLES["sessions"] if name not in ("system_prompt", "system_prompt_hash")
)


class Params:
    """Positional parameters collected while a statement is assembled: ``add`` returns its ``$n``."""

    def __init__(self, values: Iterable[Any] = ()) -> None:
        self.values: list[Any] = list(values)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def content_present_sql(alias: str) -> str:
    """True when the message has content (text, JSON or bytes columns)."""
    return f"({alias}.content IS NOT NULL OR {alias}.content_bytes IS NOT NULL)"


def cwd_prefix_clause(prefix: str, params: Params, alias: str = "s") -> str:
    """``cwd`` equal to the prefix (trailing separators ignored) or below it, for / and \\ paths."""
    base = prefix.rstrip("/\\") or prefix
    escaped = escape_like(base)
    equal, below_slash, below_backslash = params.add(base), params.add(f"{escaped}/%"), params.add(f"{escaped}\\\\%")
    return (
        f"({alias}.cwd = {equal} OR {alias}.cwd LIKE {below_slash} ESCAPE '\\'"
        f" OR {alias}.cwd LIKE {below_backslash} ESCAPE '\\')"
    )


def listable_sql(alias: str = "s") -> str:
    """Rows a session picker shows: roots, /branch children and reset children, never delegates."""
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
    return f"(({a}.parent_session_id IS NULL OR {branch} OR {reset}) AND {marker_sql(a, '_delegate_from')} IS NULL)"


# A session's cost as the lists show it: the actual cost when one was recorded, else the estimate.
SESSION_COST_SQL = "COALESCE(NULLIF(s.actual_cost_usd, 0), s.estimated_cost_usd, 0)"
# ``list_sessions_rich(sort=...)``: each order ends with the default one, so pages are stable.
SESSION_ORDER = {
    "started": "s.started_at DESC, s.id DESC",
    "cost": f"{SESSION_COST_SQL} DESC, s.started_at DESC, s.id DESC",
    "messages": "s.message_count DESC, s.started_at DESC, s.id DESC",
}


def session_filters(opts: dict[str, Any], params: Params, *, listable: bool) -> list[str]:
    """WHERE clauses shared by ``list_sessions_rich`` and the counters (alias ``s``)."""
    where: list[str] = []
    if listable:
        where.append(listable_sql("s"))
    wanted = [opts["source"]] if opts.get("source") else list(opts.get("sources") or [])
    if wanted:
        where.append(f"s.source = ANY({params.add(wanted)}::text[])")
    if opts.get("session_key"):
        where.append(f"s.session_key = {params.add(opts['session_key'])}")
    excluded = list(opts.get("exclude_sources") or [])
    if excluded:
        where.append(f"NOT (s.source = ANY({params.add(excluded)}::text[]))")
    if opts.get("cwd_prefix"):
        where.append(cwd_prefix_clause(opts["cwd_prefix"], params))
    if (opts.get("min_message_count") or 0) > 0:
        where.append(f"s.message_count >= {params.add(opts['min_message_count'])}")
    if opts.get("archived_only"):
        where.append("s.archived = 1")
    elif not opts.get("include_archived"):
        where.append("s.archived = 0")
    if opts.get("exclude_hidden"):
        where.append("s.hidden = 0")
    if opts.get("pinned_only"):
        where.append("s.pinned = 1")
    if opts.get("started_after") is not None:
        where.append(f"s.started_at >= {params.add(opts['started_after'])}")
    if opts.get("started_before") is not None:
        where.append(f"s.started_at < {params.add(opts['started_before'])}")
    if opts.get("model"):
        where.append(f"s.model = {params.add(opts['model'])}")
    if opts.get("tool_name"):
        where.append("EXISTS (SELECT 1 FROM messages AS tm WHERE tm.session_id = s.id "
                     f"AND tm.tool_name = {params.add(opts['tool_name'])})")
    if opts.get("min_cost") is not None:
        where.append(f"{SESSION_COST_SQL} >= {params.add(opts['min_cost'])}")
    return where


def _where(clauses: Sequence[str]) -> str:
    return f"WHERE {' AND '.join(clauses)}" if clauses else ""


# --------------------------------------------------------------------- previews

_FLAT = "replace(replace(pm.content, chr(10), ' '), chr(13), ' ')"
_WINDOW = PREVIEW_SKILL_WINDOW
# The first user turn's excerpt, cut as SQLite cuts it; JSON and byte kinds are finished in Python.
_PREVIEW_JOIN = f"""LEFT JOIN LATERAL (
    SELECT pm.content_kind AS kind,
        CASE
            WHEN pm.content_kind = {JSON} THEN substr(pm.content, 1, 16000)
            WHEN substr(pm.content, 1, {len(SKILL_INVOCATION_PREFIX)}) = '{SKILL_INVOCATION_PREFIX}' THEN
                CASE WHEN length(pm.content) > {2 * _WINDOW}
                     THEN substr({_FLAT}, 1, {_WINDOW}) || chr(30) || right({_FLAT}, {_WINDOW})
                     ELSE substr({_FLAT}, 1, {2 * _WINDOW}) END
            ELSE substr({_FLAT}, 1, {PREVIEW_HEAD})
        END AS excerpt,
        substring(pm.content_bytes FROM 1 FOR 16000) AS excerpt_bytes
    FROM messages AS pm
    WHERE pm.session_id = s.id AND pm.role = 'user' AND {content_present_sql('pm')}
    ORDER BY pm.timestamp, pm.id LIMIT 1
) AS pv ON true"""


def _raw_preview(kind: int | None, excerpt: str | None, raw: bytes | None) -> Any:
    """The excerpt SQLite's preview SQL would have selected, for ``shape_preview``."""
    if kind == JSON:
        # SQLite keeps the first 16000 bytes of the marker-prefixed text.
        return (JSON_CONTENT_PREFIX + (excerpt or "")).encode("utf-8", "surrogatepass")[:16000]
    if kind in (BYTES, NUL_TEXT) and raw is not None:
        text = raw.decode("utf-8", "replace").replace("\n", " ").replace("\r", " ")
        return text[: 2 * _WINDOW] if text.startswith(SKILL_INVOCATION_PREFIX) else text[:PREVIEW_HEAD]
    return excerpt


def _rich_select(compact: bool, *, with_heartbeat: bool = True, rows: str = "sessions AS s") -> str:
    """``SELECT`` of rich-row columns over ``rows`` (which must expose the session as ``s``)."""
    if compact:
        columns = ", ".join(f"s.{c}" for c in COMPACT_SESSION_COLUMNS)
        join = ""
    else:
        columns = "s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt"
        join = "LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash"
    clock = last_active_sql("s") if with_heartbeat else newest_or_started_sql("s")
    return (
        f"SELECT {columns}, pv.kind AS _pv_kind, pv.excerpt AS _pv_excerpt, pv.excerpt_bytes AS _pv_bytes, "
        f"{clock} AS last_active FROM {rows} {join} {_PREVIEW_JOIN}"
    )


def _finish_rich_row(record: Any) -> dict[str, Any]:
    row = dict(record)
    if "_resolved_prompt" in row:
        row["system_prompt"] = row.pop("_resolved_prompt")
    raw = _raw_preview(row.pop("_pv_kind"), row.pop("_pv_excerpt"), row.pop("_pv_bytes"))
    row["preview"] = shape_preview(raw)
    return row


async def rich_rows(conn: Any, sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Run a ``_rich_select`` statement and shape its rows."""
    return [_finish_rich_row(r) for r in await conn.fetch(sql, *params)]


async def rich_rows_by_id(conn: Any, ids: Iterable[str], compact: bool) -> dict[str, dict[str, Any]]:
    """Rich rows for ``ids`` keyed by id (unknown ids are absent)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    rows = await rich_rows(conn, f"{_rich_select(compact)} WHERE s.id = ANY($1::text[])", [wanted])
    return {row["id"]: row for row in rows}


async def _project_tips(conn: Any, rows: list[dict[str, Any]], compact: bool) -> list[dict[str, Any]]:
    tips = {r["id"]: await compression_tip(conn, r["id"]) for r in rows if r.get("end_reason") == "compression"}
    tips = {root: tip for root, tip in tips.items() if tip != root}
    if not tips:
        return rows
    return project_tips(rows, tips, await rich_rows_by_id(conn, tips.values(), compact))


def _chain_query(opts: dict[str, Any], base: list[str], params: Params) -> str:
    """The ``order_by_last_active`` page: rows ranked by the freshest member of their compression chain."""
    filters: list[str] = []
    id_needle = (opts.get("id_query") or "").strip().lower()
    search_needle = (opts.get("search_query") or "").strip().lower()
    if id_needle:
        filters.append(
            "EXISTS (SELECT 1 FROM chain AS cq WHERE cq.root_id = s.id AND "
            f"lower(cq.cur_id) LIKE {params.add('%' + escape_like(id_needle) + '%')} ESCAPE '\\')"
        )
    if search_needle:
        squashed = re.sub(r"[\W_]+", "", search_needle)
        title = "lower(COALESCE(cs.title, ''))"
        needle = params.add(f"%{escape_like(search_needle)}%")
        match = [f"{title} LIKE {needle} ESCAPE '\\'", f"lower(cq.cur_id) LIKE {needle} ESCAPE '\\'"]
        if squashed:
            stripped = f"replace(replace(replace(replace({title}, '-', ''), '_', ''), '.', ''), ' ', '')"
            match.append(f"{stripped} LIKE {params.add('%' + escape_like(squashed) + '%')} ESCAPE '\\'")
        filters.append(
            "EXISTS (SELECT 1 FROM chain AS cq JOIN sessions AS cs ON cs.id = cq.cur_id "
            f"WHERE cq.root_id = s.id AND ({' OR '.join(match)}))"
        )
    limit, offset = params.add(opts["limit"]), params.add(opts["offset"])
    return f"""
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
    LIMIT {limit} OFFSET {offset}
)
{_rich_select(bool(opts.get('compact_rows')), rows="page JOIN sessions AS s ON s.id = page.id")}
ORDER BY page.freshest DESC, s.started_at DESC, s.id DESC
"""


@query
async def list_sessions_rich(conn: Any, opts: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``list_sessions_rich`` page (see the facade for the option meanings)."""
    compact = bool(opts.get("compact_rows"))
    include_children = bool(opts.get("include_children"))
    params = Params()
    base = session_filters(opts, params, listable=not include_children)
    base_values = list(params.values)
    if opts.get("order_by_last_active"):
        sql = _chain_query(opts, base, params)
    else:
        # Page the ids first, so previews and activity are computed for the page only.
        order = SESSION_ORDER[opts.get("sort") or "started"]
        page = (
            f"(SELECT s.id FROM sessions AS s {_where(base)} ORDER BY {order} "
            f"LIMIT {params.add(opts['limit'])} OFFSET {params.add(opts['offset'])}) AS page "
            "JOIN sessions AS s ON s.id = page.id"
        )
        sql = f"{_rich_select(compact, rows=page)} ORDER BY {order}"
    rows = await rich_rows(conn, sql, params.values)
    if opts.get("include_pinned"):
        seen = {r["id"] for r in rows}
        pinned_sql = (
            f"{_rich_select(compact, with_heartbeat=False)} {_where([*base, 's.pinned = 1'])} "
            "ORDER BY s.started_at DESC, s.id DESC"
        )
        rows.extend(r for r in await rich_rows(conn, pinned_sql, base_values) if r["id"] not in seen)
    if opts.get("project_compression_tips", True) and not include_children:
        rows = await _project_tips(conn, rows, compact)
    return rows


@query
async def session_rich_row(conn: Any, session_id: str, compact: bool) -> dict[str, Any] | None:
    return (await rich_rows_by_id(conn, [session_id], compact)).get(session_id)


# --------------------------------------------------------------------- counters


@query
async def count_sessions(conn: Any, opts: dict[str, Any]) -> int:
    params = Params()
    where = session_filters(opts, params, listable=bool(opts.get("exclude_children")))
    return int(await conn.fetchval(f"SELECT COUNT(*) FROM sessions AS s {_where(where)}", *params.values))


@query
async def count_sessions_by_source(conn: Any, opts: dict[str, Any]) -> dict[str, int]:
    params = Params()
    where = session_filters(opts, params, listable=bool(opts.get("exclude_children")))
    label = "COALESCE(NULLIF(s.source, ''), 'cli')"
    rows = await conn.fetch(
        f"SELECT {label} AS src, COUNT(*) AS n FROM sessions AS s {_where(where)} "
        f'GROUP BY src ORDER BY n DESC, {label} COLLATE "C"',
        *params.values,
    )
    return {str(src): int(n) for src, n in rows}


@query
async def sessions_at_least(conn: Any, n: int) -> bool:
    if n <= 0:
        return True
    return len(await conn.fetch("SELECT 1 FROM sessions LIMIT $1", n)) >= n


@query
async def count_empty_sessions(conn: Any) -> int:
    return int(
        await conn.fetchval(
            "SELECT COUNT(*) FROM sessions WHERE message_count = 0 AND ended_at IS NOT NULL AND archived = 0"
        )
    )


@query
async def distinct_session_cwds(conn: Any, include_archived: bool) -> list[dict[str, Any]]:
    archived = "" if include_archived else " AND archived = 0"
    # btrim of spaces only: SQLite's trim() strips spaces, not every whitespace.
    rows = await conn.fetch(
        "SELECT cwd, COUNT(*), MAX(COALESCE(ended_at, started_at, 0)) FROM sessions "
        f"WHERE cwd IS NOT NULL AND btrim(cwd, ' ') <> ''{archived} GROUP BY cwd ORDER BY cwd COLLATE \"C\""
    )
    return [{"cwd": cwd, "sessions": int(n or 0), "last_active": float(last or 0)} for cwd, n, last in rows]


# --------------------------------------------------------------- session reads


@query
async def resolve_session_id(conn: Any, prefix: str) -> str | None:
    """The exact id, else the one id starting with ``prefix``; None for no match or several."""
    if await conn.fetchval("SELECT 1 FROM sessions WHERE id = $1", prefix):
        return prefix
    rows = await conn.fetch("SELECT id FROM sessions WHERE starts_with(id, $1) LIMIT 2", prefix)
    return rows[0][0] if len(rows) == 1 else None


@query
async def skill_scaffolded_sessions(conn: Any, limit: int) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        f"""
        SELECT s.id, s.title, m.content_kind, m.content, m.content_bytes FROM sessions AS s
        JOIN messages AS m ON m.id = (
            SELECT fm.id FROM messages AS fm
            WHERE fm.session_id = s.id AND fm.role = 'user' AND {content_present_sql('fm')}
            ORDER BY fm.timestamp, fm.id LIMIT 1)
        WHERE s.title IS NOT NULL AND m.content_kind = 0 AND starts_with(m.content, $1)
        ORDER BY s.started_at DESC, s.id DESC LIMIT $2
        """,
        SKILL_INVOCATION_PREFIX, limit,
    )
    return [{"id": r["id"], "title": r["title"], "content": r["content"]} for r in rows]


@query
async def first_assistant_text(conn: Any, session_id: str) -> str:
    record = await conn.fetchrow(
        f"SELECT {MESSAGE_SELECT} FROM messages AS m WHERE session_id = $1 AND role = 'assistant' "
        f"AND {content_present_sql('m')} ORDER BY timestamp, id LIMIT 1",
        session_id,
    )
    decoded = decode_content(message_dict(record)["content"]) if record is not None else None
    return decoded if isinstance(decoded, str) else ""


@query
async def session_model_config(conn: Any, session_id: str) -> tuple[bool, str | None]:
    """``(session exists, stored model_config text)``."""
    row = await conn.fetchrow("SELECT model_config FROM sessions WHERE id = $1", session_id)
    return (False, None) if row is None else (True, row[0])


@query
async def session_activity_row(conn: Any, session_id: str) -> tuple[Any, Any, Any] | None:
    """``(last_activity_at, description, provenance)`` or None for an unknown session."""
    row = await conn.fetchrow(
        "SELECT last_activity_at, last_activity_description, last_activity_provenance FROM sessions WHERE id = $1",
        session_id,
    )
    return None if row is None else (row[0], row[1], row[2])


# ------------------------------------------------------------------- messages


async def message_rows(conn: Any, where: str, *params: Any) -> list[dict[str, Any]]:
    """Decoded message rows (``get_messages`` shape) for ``SELECT ... FROM messages AS m <where>``."""
    records = await conn.fetch(f"SELECT {MESSAGE_SELECT} FROM messages AS m {where}", *params)
    return [decode_message_row(message_dict(r)) for r in records]


async def _around(conn: Any, session_id: str, anchor: int, window: int) -> dict[str, Any]:
    if await conn.fetchval("SELECT 1 FROM messages WHERE id = $1 AND session_id = $2", anchor, session_id) is None:
        return {"window": [], "messages_before": 0, "messages_after": 0}
    before = await message_rows(
        conn, "WHERE session_id = $1 AND id <= $2 ORDER BY id DESC LIMIT $3",
        session_id, anchor, min(window, INT64_MAX - 1) + 1,
    )
    after = await message_rows(conn, "WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3", session_id, anchor, window)
    before.reverse()
    return {"window": before + after, "messages_before": len(before) - 1, "messages_after": len(after)}


@query
async def messages_around(conn: Any, session_id: str, anchor: int, window: int) -> dict[str, Any]:
    return await _around(conn, session_id, anchor, window)


# SQLite's ``length(content) > 0`` over the encoded value: any non-empty text, JSON or bytes.
_HAS_LENGTH = f"(length(m.content) > 0 OR m.content_kind = {JSON} OR length(m.content_bytes) > 0)"


@query
async def anchored_view(
    conn: Any, session_id: str, anchor: int, window: int, bookend: int, keep_roles: tuple[str, ...] | None
) -> dict[str, Any]:
    view = await _around(conn, session_id, anchor, window)
    rows = view["window"]
    view["bookend_start"], view["bookend_end"] = [], []
    if not rows:
        return view
    if keep_roles is not None:
        view["window"] = [r for r in rows if r["id"] == anchor or r["role"] in keep_roles]
    if bookend:
        roles = "" if keep_roles is None else " AND role = ANY($4::text[])"
        extra = [] if keep_roles is None else [list(keep_roles)]
        view["bookend_start"] = await message_rows(
            conn, f"WHERE session_id = $1 AND id < $2{roles} AND {_HAS_LENGTH} ORDER BY id LIMIT $3",
            session_id, rows[0]["id"], bookend, *extra,
        )
        end = await message_rows(
            conn, f"WHERE session_id = $1 AND id > $2{roles} AND {_HAS_LENGTH} ORDER BY id DESC LIMIT $3",
            session_id, rows[-1]["id"], bookend, *extra,
        )
        end.reverse()
        view["bookend_end"] = end
    return view


@query
async def recent_user_messages(conn: Any, session_id: str, limit: int, include_inactive: bool) -> list[dict[str, Any]]:
    active = "" if include_inactive else " AND active = 1"
    rows = await message_rows(
        conn,
        f"WHERE session_id = $1 AND role = 'user'{active} AND COALESCE(display_kind, '') = '' ORDER BY id DESC LIMIT $2",
        session_id, limit,
    )
    return [{"id": r["id"], "timestamp": r["timestamp"], "preview": text_preview(r["content"])} for r in rows]


@query
async def latest_message_row_id(conn: Any, session_id: str, role: str, offset: int, require_text: bool) -> int | None:
    # SQLite's trim() strips spaces only; JSON content never trims to ''.
    text = " AND (m.content_kind <> 0 OR btrim(m.content, ' ') <> '')" if require_text else ""
    value = await conn.fetchval(
        f"SELECT id FROM messages AS m WHERE session_id = $1 AND role = $2 AND active = 1{text} "
        "ORDER BY id DESC LIMIT 1 OFFSET $3",
        session_id, role, offset,
    )
    return None if value is None else int(value)


@query
async def message_role(conn: Any, session_id: str, row_id: int) -> str | None:
    return await conn.fetchval(
        "SELECT role FROM messages WHERE id = $1 AND session_id = $2 AND active = 1", row_id, session_id
    )


@query
async def has_inactive_messages(conn: Any, session_id: str) -> bool:
    return await conn.fetchval("SELECT 1 FROM messages WHERE session_id = $1 AND active = 0 LIMIT 1", session_id) is not None


@query
async def has_platform_message(conn: Any, session_id: str, platform_message_id: str) -> bool:
    return (
        await conn.fetchval(
            "SELECT 1 FROM messages WHERE session_id = $1 AND platform_message_id = $2 LIMIT 1",
            session_id, platform_message_id,
        )
        is not None
    )
