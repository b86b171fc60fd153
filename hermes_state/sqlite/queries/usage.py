"""Read queries over the per-model usage ledger (``session_model_usage``)."""

from __future__ import annotations

from typing import Any

from ...usage_report import LEDGER_COLUMNS, LEDGER_COSTS, LEDGER_COUNTERS, LEDGER_KEYS
from .core import fetch_dicts, snapshot
from .registry import query

__all__: list[str] = []

_SUMS = ", ".join(f"u.{name} AS {name}" for name in (*LEDGER_COUNTERS, *LEDGER_COSTS))
# A session with usage in its totals but no ledger row (absolute counts, imports) reports its totals.
_TOTALS = ", ".join([*(f"COALESCE(s.{name}, 0)" for name in LEDGER_COUNTERS), *(f"COALESCE(s.{name}, 0.0)" for name in LEDGER_COSTS)])
_HAS_USAGE = " OR ".join(f"COALESCE(s.{name}, 0) <> 0" for name in (*LEDGER_COUNTERS, *LEDGER_COSTS))


@query
def session_model_usage(conn: Any, session_id: str) -> list[dict[str, Any]]:
    keys = ", ".join(LEDGER_KEYS)
    return fetch_dicts(
        conn,
        f"SELECT {', '.join(LEDGER_COLUMNS)} FROM session_model_usage WHERE session_id = ? ORDER BY task, {keys}",
        (session_id,),
    )


@query
def usage_rows(conn: Any, since: float | None, until: float | None) -> list[dict[str, Any]]:
    """Raw rows for ``usage_by_day``: ledger rows, and the totals of sessions that have none, started in range."""
    span = "(?1 IS NULL OR s.started_at >= ?1) AND (?2 IS NULL OR s.started_at < ?2)"
    sql = (
        f"SELECT u.session_id AS session_id, s.started_at AS started_at, u.model AS model, {_SUMS} "
        f"FROM session_model_usage AS u JOIN sessions AS s ON s.id = u.session_id WHERE {span} "
        f"UNION ALL SELECT s.id, s.started_at, COALESCE(NULLIF(s.model, ''), 'unknown'), {_TOTALS} FROM sessions AS s "
        f"WHERE {span} AND ({_HAS_USAGE}) "
        "AND NOT EXISTS (SELECT 1 FROM session_model_usage AS l WHERE l.session_id = s.id)"
    )
    with snapshot(conn):
        return fetch_dicts(conn, sql, (since, until))
