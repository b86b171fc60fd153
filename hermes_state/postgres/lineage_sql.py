"""SQL fragments for compression lineages and activity clocks (PostgreSQL spelling).

They mean what the fragments at the top of ``sqlite.queries.compression``
mean, so listing, retention and compression agree on what a continuation
is. Markers in ``model_config`` are read through the schema's
``hermes_config_marker`` function (NULL for absent keys and for text that
is not JSON, as SQLite's ``json_valid``/``json_extract`` pair gives).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "TIP_MAX_HOPS",
    "compression_tip",
    "continuation_sql",
    "last_active_sql",
    "lineage_ids_cte",
    "marker_sql",
    "newest_or_started_sql",
]

# Hop limit of the reference store (malformed data must not loop forever).
TIP_MAX_HOPS = 100


def marker_sql(alias: str, key: str) -> str:
    """SQL for the ``model_config`` marker ``key`` of ``alias`` as text (NULL when absent or not JSON)."""
    column = f"{alias}.model_config"
    # The strpos test skips the function call (and its JSON parse) for the rows that cannot match.
    return f"(CASE WHEN strpos({column}, '{key}') > 0 THEN hermes_config_marker({column}, '{key}') END)"


def continuation_sql(alias: str) -> str:
    """SQL that is true when ``alias`` continues its parent (not a tool run, /branch, delegate or reset)."""
    return (
        f"(COALESCE({alias}.source, '') <> 'tool'"
        f" AND {marker_sql(alias, '_branched_from')} IS NULL"
        f" AND {marker_sql(alias, '_delegate_from')} IS NULL"
        f" AND {marker_sql(alias, '_reset_from')} IS NULL)"
    )


def last_active_sql(alias: str) -> str:
    """SQL for the freshest of ``last_activity_at`` and the newest message, else ``started_at``."""
    return (
        f"COALESCE(NULLIF(GREATEST(COALESCE({alias}.last_activity_at, 0), "
        f"COALESCE((SELECT MAX(lm.timestamp) FROM messages AS lm WHERE lm.session_id = {alias}.id), 0)), 0), "
        f"{alias}.started_at)"
    )


def newest_or_started_sql(alias: str) -> str:
    """Newest message timestamp, else ``started_at`` (a clock that ignores activity heartbeats)."""
    return (
        f"COALESCE((SELECT MAX(nm.timestamp) FROM messages AS nm WHERE nm.session_id = {alias}.id), "
        f"{alias}.started_at)"
    )


def lineage_ids_cte(param: str = "$1") -> str:
    """A ``WITH RECURSIVE`` prefix defining ``lineage(id)``: the whole compression lineage of ``param``."""
    return f"""
WITH RECURSIVE
  ancestors(id) AS (
    SELECT {param}::text
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


_TIP_STEP_SQL = f"""
SELECT c.id FROM sessions AS p JOIN sessions AS c ON c.parent_session_id = p.id
WHERE p.id = $1 AND p.end_reason = 'compression' AND {continuation_sql('c')}
ORDER BY CASE WHEN c.end_reason = 'compression' THEN 0 WHEN c.ended_at IS NULL THEN 1 ELSE 2 END,
         {last_active_sql('c')} DESC, c.started_at DESC, c.id DESC
LIMIT 1
"""


async def compression_tip(conn: Any, session_id: str) -> str:
    """Follow compression continuations from ``session_id`` to the live tip (the input when none)."""
    current, seen = session_id, {session_id}
    for _ in range(TIP_MAX_HOPS):
        child = await conn.fetchval(_TIP_STEP_SQL, current)
        if child is None or child in seen:
            break
        current = child
        seen.add(child)
    return current
