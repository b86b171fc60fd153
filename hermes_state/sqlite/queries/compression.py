"""Read queries for compression leases, lineage walks, resume and the compressor's counters.

The SQL fragments at the top describe which parent links form a compression
lineage; the write handlers use the same fragments, so reads and writes
agree on what a continuation is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...errors import SessionResumeTooLargeError
from ...limits import INT64_MAX
from .core import fetch_dicts, resolve_prompt, session_chain, snapshot, transcript_chain
from .registry import query

__all__ = [
    "compression_tip",
    "continuation_sql",
    "last_active_sql",
    "lineage_ids_cte",
    "marker_sql",
    "session_rows",
]

# Hop limits of the reference store (malformed data must not loop forever).
TIP_MAX_HOPS = 100
RESUME_MAX_HOPS = 32


def marker_sql(alias: str, key: str) -> str:
    """SQL for the ``model_config`` marker ``key`` of ``alias`` (NULL when absent or not JSON)."""
    column = f"{alias}.model_config"
    return f"(CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{key}') END)"


def continuation_sql(alias: str) -> str:
    """SQL that is true when ``alias`` is not an explicit fork of its parent.

    Tool runs, ``/branch`` copies, delegate sub-agents and reset children all
    carry a ``parent_session_id`` too, but they are other conversations; only
    the remaining children continue the parent.
    """
    return (
        f"(COALESCE({alias}.source, '') <> 'tool'"
        f" AND {marker_sql(alias, '_branched_from')} IS NULL"
        f" AND {marker_sql(alias, '_delegate_from')} IS NULL"
        f" AND {marker_sql(alias, '_reset_from')} IS NULL)"
    )


def last_active_sql(alias: str) -> str:
    """SQL for the freshest of ``last_activity_at`` and the newest message, else ``started_at``."""
    return (
        f"COALESCE(NULLIF(MAX(COALESCE({alias}.last_activity_at, 0), "
        f"COALESCE((SELECT MAX(lm.timestamp) FROM messages AS lm WHERE lm.session_id = {alias}.id), 0)), 0), "
        f"{alias}.started_at)"
    )


def lineage_ids_cte(param: str = "?1") -> str:
    """A ``WITH RECURSIVE`` prefix defining ``lineage(id)``: the whole compression lineage of ``param``.

    It climbs compression parents to the root, then takes every continuation
    below any of those ancestors, so siblings and later tips are included.
    """
    return f"""
WITH RECURSIVE
  ancestors(id) AS (
    SELECT {param}
    UNION
    SELECT p.id FROM ancestors AS a
    JOIN sessions AS c ON c.id = a.id
    JOIN sessions AS p ON p.id = c.parent_session_id
    WHERE p.end_reason = 'compression' AND {continuation_sql('c')}
  ),
  lineage(id) AS (
    SELECT id FROM ancestors
    UNION
    SELECT c.id FROM lineage AS l
    JOIN sessions AS p ON p.id = l.id
    JOIN sessions AS c ON c.parent_session_id = p.id
    WHERE p.end_reason = 'compression' AND {continuation_sql('c')}
  )
"""


def session_rows(conn: Any, where: str, params: tuple[Any, ...], tail: str = "") -> list[dict[str, Any]]:
    """Session rows in ``get_session`` shape (prompt resolved) matching ``where`` on alias ``s``."""
    rows = fetch_dicts(
        conn,
        "SELECT s.*, COALESCE(sp.prompt, s.system_prompt) AS _resolved_prompt "
        f"FROM sessions AS s LEFT JOIN system_prompts AS sp ON sp.hash = s.system_prompt_hash WHERE {where} {tail}",
        params,
    )
    return [resolve_prompt(r) for r in rows]


_TIP_STEP_SQL = f"""
SELECT c.id FROM sessions AS p JOIN sessions AS c ON c.parent_session_id = p.id
WHERE p.id = ? AND p.end_reason = 'compression' AND {continuation_sql('c')}
ORDER BY CASE WHEN c.end_reason = 'compression' THEN 0 WHEN c.ended_at IS NULL THEN 1 ELSE 2 END,
         {last_active_sql('c')} DESC, c.started_at DESC, c.id DESC
LIMIT 1
"""


def _walk(conn: Any, step_sql: str, start: str, hops: int) -> Iterator[str]:
    """Yield ``start``, then each id ``step_sql`` picks next; stops on none, a repeat, or after ``hops`` steps."""
    current, seen = start, {start}
    yield current
    for _ in range(hops):
        row = conn.execute(step_sql, (current,)).fetchone()
        if row is None or row[0] in seen:
            return
        current = row[0]
        seen.add(current)
        yield current


def compression_tip(conn: Any, session_id: str) -> str:
    """Follow compression continuations from ``session_id`` to the live tip (the input when none)."""
    *_, tip = _walk(conn, _TIP_STEP_SQL, session_id, TIP_MAX_HOPS)
    return tip


@query
def compression_tip_id(conn: Any, session_id: str) -> str:
    with snapshot(conn):
        return compression_tip(conn, session_id)


# A parent ended by a session switch whose child keeps its session_key was
# reset into that child (a new conversation on the same chat), not continued.
_PLAIN_CHILD_SQL = f"""
SELECT c.id FROM sessions AS c JOIN sessions AS p ON p.id = c.parent_session_id
WHERE c.parent_session_id = ? AND {continuation_sql('c')}
  AND NOT (COALESCE(p.end_reason, '') = 'session_switch' AND c.session_key IS NOT NULL
           AND c.session_key = p.session_key)
ORDER BY c.started_at DESC, c.id DESC LIMIT 1
"""


@query
def resume_target_id(conn: Any, session_id: str) -> str:
    """The compression tip, then the deepest plain descendant that holds messages."""
    with snapshot(conn):
        tip = compression_tip(conn, session_id)
        best = tip
        for current in _walk(conn, _PLAIN_CHILD_SQL, tip, RESUME_MAX_HOPS - 1):
            if conn.execute("SELECT 1 FROM messages WHERE session_id = ? LIMIT 1", (current,)).fetchone():
                best = current
        return best


_LINEAGE_ROW_SQL = (
    f"SELECT s.id, s.parent_session_id, s.end_reason, {continuation_sql('s')} AS continues, "
    "(SELECT p.end_reason FROM sessions AS p WHERE p.id = s.parent_session_id) AS parent_end_reason "
    "FROM sessions AS s WHERE s.id = ?"
)
_FIRST_CONTINUATION_SQL = (
    f"SELECT c.id, c.end_reason FROM sessions AS c WHERE c.parent_session_id = ? AND {continuation_sql('c')} "
    "ORDER BY c.started_at ASC, c.id ASC LIMIT 1"
)


@query
def compression_lineage_ids(conn: Any, session_id: str) -> list[str]:
    """Root-to-tip ids of the session's compression lineage (``[]`` unknown, ``[id]`` for a fork)."""
    with snapshot(conn):
        row = conn.execute(_LINEAGE_ROW_SQL, (session_id,)).fetchone()
        if row is None:
            return []
        if not row[3]:
            return [session_id]
        root, seen = row, {session_id}
        while root[1] is not None and root[4] == "compression" and root[3] and root[1] not in seen:
            parent = conn.execute(_LINEAGE_ROW_SQL, (root[1],)).fetchone()
            if parent is None:
                break
            root = parent
            seen.add(root[0])
        lineage = [root[0]]
        current_id, current_reason = root[0], root[2]
        while current_reason == "compression":
            child = conn.execute(_FIRST_CONTINUATION_SQL, (current_id,)).fetchone()
            if child is None or child[0] in lineage:
                break
            lineage.append(child[0])
            current_id, current_reason = child
        return lineage if session_id in lineage else [session_id]


@query
def conversation_root_id(conn: Any, session_id: str) -> str:
    with snapshot(conn):
        return session_chain(conn, session_id)[0]


def _active_count(conn: Any, ids: list[str], bound: int | None) -> int:
    marks = ", ".join("?" * len(ids))
    inner = f"SELECT 1 FROM messages WHERE session_id IN ({marks}) AND active = 1"
    if bound is None:
        return int(conn.execute(f"SELECT COUNT(*) FROM ({inner})", ids).fetchone()[0])
    over = min(bound, INT64_MAX - 1) + 1  # one past the bound, still a 64-bit int
    return int(conn.execute(f"SELECT COUNT(*) FROM ({inner} LIMIT ?)", (*ids, over)).fetchone()[0])


def _check_resume_size(conn: Any, session_id: str, ids: list[str], limit: int) -> int:
    """Bounded count of the lineage's active rows; raises when it exceeds ``limit`` (0: no limit)."""
    if limit <= 0:
        return 0
    count = _active_count(conn, ids, limit)
    if count > limit:
        raise SessionResumeTooLargeError(session_id, count, limit)
    return count


@query
def resume_message_count(conn: Any, session_id: str) -> int:
    """Active rows a full resume would load: those of the session's transcript chain (``resume_rows``)."""
    with snapshot(conn):
        return _active_count(conn, transcript_chain(conn, session_id), None)


@query
def resume_size_check(conn: Any, session_id: str, limit: int) -> int:
    with snapshot(conn):
        return _check_resume_size(conn, session_id, transcript_chain(conn, session_id), limit)


@query
def resume_rows(conn: Any, session_id: str, limit: int) -> list[dict[str, Any]]:
    """Active message rows of the session's transcript chain, root first, after the size guard."""
    with snapshot(conn):
        ids = transcript_chain(conn, session_id)
        _check_resume_size(conn, session_id, ids, limit)
        marks = ", ".join("?" * len(ids))
        return fetch_dicts(conn, f"SELECT * FROM messages WHERE session_id IN ({marks}) AND active = 1 ORDER BY id", ids)


@query
def live_compression_child(conn: Any, parent_session_id: str) -> dict[str, Any] | None:
    with snapshot(conn):
        parent = conn.execute(
            "SELECT 1 FROM sessions WHERE id = ? AND ended_at IS NOT NULL AND end_reason = 'compression'",
            (parent_session_id,),
        ).fetchone()
        if parent is None:
            return None
        rows = session_rows(
            conn,
            f"s.parent_session_id = ? AND s.ended_at IS NULL AND {continuation_sql('s')}",
            (parent_session_id,),
            "ORDER BY s.started_at ASC, s.id ASC LIMIT 2",
        )
        return rows[0] if len(rows) == 1 else None


@query
def compression_lock_holder(conn: Any, session_id: str, now: float) -> str | None:
    row = conn.execute(
        "SELECT holder FROM compression_locks WHERE session_id = ? AND expires_at >= ?", (session_id, now)
    ).fetchone()
    return None if row is None else row[0]


@query
def compression_cooldown_row(conn: Any, session_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT compression_failure_cooldown_until, compression_failure_error FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        return {"session_exists": False, "cooldown_until": None, "error": None}
    return {"session_exists": True, "cooldown_until": None if row[0] is None else float(row[0]), "error": row[1]}


_COUNTERS = ("compression_fallback_streak", "compression_ineffective_count")


@query
def compression_counter(conn: Any, session_id: str, column: str) -> int:
    if column not in _COUNTERS:
        raise ValueError(f"unknown compression counter: {column!r}")
    row = conn.execute(f"SELECT {column} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    try:
        return max(0, int(row[0] or 0)) if row is not None else 0
    except (TypeError, ValueError):
        return 0


@query
def active_message_watermark(conn: Any, session_id: str) -> int:
    """The id of the session's newest active message, 0 when it has none."""
    return int(
        conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages WHERE session_id = ? AND active = 1", (session_id,))
        .fetchone()[0]
    )
# Columns of a child row: enough to link it and to say how it relates to its parent.
CHILD_COLUMNS = "c.id, c.source, c.title, c.model, c.model_config, c.session_key, c.started_at, c.ended_at, c.end_reason, c.message_count"


@query
def child_session_rows(conn: Any, session_id: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """``(parent, children)``: the parent's ``end_reason``/``ended_at``/``session_key`` and its direct children, oldest first."""
    with snapshot(conn):
        parents = fetch_dicts(conn, "SELECT end_reason, ended_at, session_key FROM sessions WHERE id = ?", (session_id,))
        if not parents:
            return None, []
        children = fetch_dicts(
            conn,
            f"SELECT {CHILD_COLUMNS} FROM sessions AS c WHERE c.parent_session_id = ? ORDER BY c.started_at, c.id",
            (session_id,),
        )
        return parents[0], children
