"""Usage figures for reports: the ledger's columns and the per-day, per-model sums both backends feed.

The backends return raw rows (one per ledger row, plus the totals of
sessions that have usage but no ledger row); the sums are made here, once,
so SQLite and PostgreSQL report the same figures. Counters add up like the
stored ones (saturating at the 64-bit limits), costs like stored costs.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any

from .limits import finite_sum, saturating_add

__all__ = ["LEDGER_COUNTERS", "LEDGER_COSTS", "LEDGER_KEYS", "LEDGER_COLUMNS", "day_of", "usage_by_day_rows"]

LEDGER_COUNTERS = (
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
)
LEDGER_COSTS = ("estimated_cost_usd", "actual_cost_usd")
# The key of a ledger row inside its session.
LEDGER_KEYS = ("model", "billing_provider", "billing_base_url", "billing_mode", "task")
# What ``session_model_usage`` returns per row, in this order.
LEDGER_COLUMNS = (*LEDGER_KEYS, *LEDGER_COUNTERS, *LEDGER_COSTS, "cost_status", "cost_source", "first_seen", "last_seen")

_EPOCH = _dt.date(1970, 1, 1)


def day_of(epoch_seconds: float) -> str:
    """The UTC calendar day of a timestamp as ``YYYY-MM-DD``."""
    return (_EPOCH + _dt.timedelta(days=int(epoch_seconds // 86400))).isoformat()


def usage_by_day_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Sum raw usage rows (``session_id``, ``started_at``, ``model``, counters, costs) per UTC day and model.

    Returns ``{day, model, sessions, <counters>, <costs>}`` dicts ordered by
    day, then model; ``sessions`` counts the distinct sessions of the group.
    """
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    members: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        key = (day_of(float(row["started_at"])), str(row["model"]))
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"day": key[0], "model": key[1], "sessions": 0}
            group.update(dict.fromkeys(LEDGER_COUNTERS, 0))
            group.update(dict.fromkeys(LEDGER_COSTS, 0.0))
            members[key] = set()
        members[key].add(row["session_id"])
        for name in LEDGER_COUNTERS:
            group[name] = saturating_add(group[name], int(row[name] or 0))
        for name in LEDGER_COSTS:
            group[name] = finite_sum(group[name], float(row[name] or 0.0))
    for key, group in groups.items():
        group["sessions"] = len(members[key])
    return [groups[key] for key in sorted(groups)]
