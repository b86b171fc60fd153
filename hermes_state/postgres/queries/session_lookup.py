"""Session lookup by id fragment: ``session_ids_matching``, as ``sqlite.queries.search`` defines it.

``search_sessions_by_id`` uses it on a store whose class has no
``list_sessions_rich`` (a host that composes the method groups itself).
"""

from __future__ import annotations

import string
from typing import Any

from ..lineage_sql import last_active_sql, marker_sql
from .listing import Params
from .registry import query

__all__ = ["ascii_lower_sql"]


def ascii_lower_sql(expression: str) -> str:
    """``expression`` with only A-Z folded to a-z: SQLite's ``lower()``, whatever the database's ctype."""
    return f"translate({expression}, '{string.ascii_uppercase}', '{string.ascii_lowercase}')"


@query
async def session_ids_matching(
    conn: Any,
    needle: str,
    limit: int,
    include_archived: bool,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
) -> list[dict[str, Any]]:
    """Listable sessions whose id contains ``needle``, freshest first (``get_session`` columns plus ``last_active``).

    Roots and branch/reset children, never subagent runs. ``needle`` arrives
    lower-cased; the id is folded as SQLite's ``lower()`` folds it (ASCII only),
    so both backends match the same ids.
    """
    params = Params([needle])
    where = [
        f"strpos({ascii_lower_sql('s.id')}, $1) > 0",
        (
            f"(s.parent_session_id IS NULL OR {marker_sql('s', '_branched_from')} IS NOT NULL "
            f"OR {marker_sql('s', '_reset_from')} IS NOT NULL)"
        ),
        f"{marker_sql('s', '_delegate_from')} IS NULL",
    ]
    if not include_archived:
        where.append("s.archived = 0")
    if sources is not None:
        where.append(f"s.source = ANY({params.add(list(sources))}::text[])")
    if excluded:
        where.append(f"NOT (s.source = ANY({params.add(list(excluded))}::text[]))")
    sql = (
        "SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt, "
        f"{last_active_sql('s')} AS last_active "
        "FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash "
        f"WHERE {' AND '.join(where)} "
        f"ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT {params.add(limit)}"
    )
    rows = []
    for record in await conn.fetch(sql, *params.values):
        row = dict(record)
        row["system_prompt"] = row.pop("_resolved_prompt")
        rows.append(row)
    return rows
