"""Handlers for token and cost accounting (the rules of ``sqlite.handlers.usage``).

PostgreSQL raises on ``bigint`` and ``float8`` overflow where SQLite turns
the sum into a REAL and clamps it, so sums are taken here in Python with the
shared saturation rules (``limits.saturating_add`` / ``finite_sum``) and
written back as values. That is safe: the writer holds the session row lock
(or the upsert below takes it), and every change to a session's counters or
usage rows goes through that lock.
"""

from __future__ import annotations

import logging
from typing import Any

from ...commands.usage import ApplyTokenDeltas, RecordAuxiliaryUsage, UpdateTokenCounts
from ...limits import finite_sum, saturating_add
from .registry import handles

log = logging.getLogger("hermes_state.usage")

_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
_LEDGER_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task")
_LEDGER_COUNTERS = ("api_call_count", *_TOKEN_FIELDS)
_LEDGER_COLUMNS = (
    *_LEDGER_KEY, *_LEDGER_COUNTERS, "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
    "first_seen", "last_seen",
)
_LEDGER_INSERT_SQL = (
    f"INSERT INTO session_model_usage ({', '.join(_LEDGER_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(_LEDGER_COLUMNS) + 1))})"
)
_LEDGER_WHERE = " AND ".join(f"{c} = ${i}" for i, c in enumerate(_LEDGER_KEY, 1))


async def add_to_ledger(conn: Any, key: tuple[str, ...], counts: list[int], costs: tuple[float, float],
                        cost_status: str | None, cost_source: str | None, now: float) -> None:
    """Add one usage record to its ledger row (created on first use), saturating like SQLite."""
    stored = await conn.fetchrow(
        f"SELECT {', '.join(_LEDGER_COUNTERS)}, estimated_cost_usd, actual_cost_usd, cost_status, cost_source "
        f"FROM session_model_usage WHERE {_LEDGER_WHERE}",
        *key,
    )
    if stored is None:
        await conn.execute(_LEDGER_INSERT_SQL, *key, *counts, *costs, cost_status, cost_source, now, now)
        return
    n = len(_LEDGER_COUNTERS)
    sums = [saturating_add(int(stored[i]), counts[i]) for i in range(n)]
    await conn.execute(
        f"UPDATE session_model_usage SET {', '.join(f'{c} = ${i}' for i, c in enumerate(_LEDGER_COUNTERS, 7))}, "
        f"estimated_cost_usd = ${n + 7}, actual_cost_usd = ${n + 8}, cost_status = ${n + 9}, "
        f"cost_source = ${n + 10}, last_seen = ${n + 11} WHERE {_LEDGER_WHERE}",
        *key, *sums,
        finite_sum(float(stored[n]), costs[0]), finite_sum(float(stored[n + 1]), costs[1]),
        cost_status if cost_status is not None else stored[n + 2],
        cost_source if cost_source is not None else stored[n + 3],
        now,
    )


async def ensure_session_row(conn: Any, session_id: str, model: str | None, now: float) -> None:
    """Create the session with source ``unknown`` if missing, else fill a NULL model; either way the row is locked."""
    await conn.execute(
        "INSERT INTO sessions (id, source, model, started_at) VALUES ($1, 'unknown', $2, $3) "
        "ON CONFLICT (id) DO UPDATE SET model = COALESCE(sessions.model, excluded.model)",
        session_id, model, now,
    )


_SESSION_FIELDS = (
    "api_call_count", "model", "billing_provider", "billing_base_url", "billing_mode", *_TOKEN_FIELDS,
    "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source", "pricing_version",
)


def _new_counters(cmd: UpdateTokenCounts, now: dict[str, Any], tokens: list[int]) -> None:
    """Apply the command's counters and costs to ``now`` (absolute values or saturating deltas)."""
    if cmd.absolute:
        now.update(zip(_TOKEN_FIELDS, tokens))
        now["estimated_cost_usd"] = float(cmd.estimated_cost_usd or 0.0)
        if cmd.actual_cost_usd is not None:
            now["actual_cost_usd"] = float(cmd.actual_cost_usd)
        now["api_call_count"] = cmd.api_call_count
        return
    for field, delta in zip(_TOKEN_FIELDS, tokens):
        now[field] = saturating_add(int(now[field] or 0), delta)
    now["estimated_cost_usd"] = finite_sum(float(now["estimated_cost_usd"] or 0), float(cmd.estimated_cost_usd or 0))
    if cmd.actual_cost_usd is not None:
        now["actual_cost_usd"] = finite_sum(float(now["actual_cost_usd"] or 0), float(cmd.actual_cost_usd))
    now["api_call_count"] = saturating_add(int(now["api_call_count"] or 0), cmd.api_call_count)


@handles(UpdateTokenCounts)
async def update_token_counts(conn: Any, cmd: UpdateTokenCounts) -> None:
    await ensure_session_row(conn, cmd.session_id, cmd.model, cmd.now)
    tokens = [getattr(cmd, f) or 0 for f in _TOKEN_FIELDS]
    has_usage = bool(any(tokens) or cmd.api_call_count or cmd.estimated_cost_usd or cmd.actual_cost_usd)
    record = await conn.fetchrow(f"SELECT {', '.join(_SESSION_FIELDS)} FROM sessions WHERE id = $1", cmd.session_id)
    now = dict(record)
    if (
        has_usage
        and not (now["api_call_count"] or 0)
        and cmd.model
        and cmd.billing_provider
        and (cmd.model != now["model"] or cmd.billing_provider != now["billing_provider"])
    ):
        # The first call that is actually billed decides the session's route.
        now.update(model=cmd.model, billing_provider=cmd.billing_provider,
                   billing_base_url=cmd.billing_base_url, billing_mode=cmd.billing_mode)
    _new_counters(cmd, now, tokens)
    for field in ("cost_status", "cost_source", "pricing_version"):
        if getattr(cmd, field) is not None:
            now[field] = getattr(cmd, field)
    if has_usage:
        for field in ("billing_provider", "billing_base_url", "billing_mode", "model"):
            if now[field] is None:
                now[field] = getattr(cmd, field)
    await conn.execute(
        f"UPDATE sessions SET {', '.join(f'{f} = ${i}' for i, f in enumerate(_SESSION_FIELDS, 2))} WHERE id = $1",
        cmd.session_id, *(now[f] for f in _SESSION_FIELDS),
    )
    if not cmd.absolute and (any(tokens) or cmd.api_call_count or cmd.estimated_cost_usd):
        key = (
            cmd.session_id,
            cmd.model or now["model"] or "unknown",
            cmd.billing_provider or now["billing_provider"] or "",
            cmd.billing_base_url or now["billing_base_url"] or "",
            cmd.billing_mode or now["billing_mode"] or "",
            "",
        )
        await add_to_ledger(
            conn, key, [cmd.api_call_count or 0, *tokens],
            (float(cmd.estimated_cost_usd or 0.0), float(cmd.actual_cost_usd or 0.0)),
            cmd.cost_status, cmd.cost_source, cmd.now,
        )


@handles(RecordAuxiliaryUsage)
async def record_auxiliary_usage(conn: Any, cmd: RecordAuxiliaryUsage) -> None:
    await ensure_session_row(conn, cmd.session_id, None, cmd.now)
    key = (cmd.session_id, cmd.model or "unknown", cmd.billing_provider or "", cmd.billing_base_url or "", "", cmd.task)
    counts = [cmd.api_call_count, *(getattr(cmd, f) or 0 for f in _TOKEN_FIELDS)]
    await add_to_ledger(conn, key, counts, (float(cmd.estimated_cost_usd or 0.0), 0.0), None, None, cmd.now)


@handles(ApplyTokenDeltas)
async def apply_token_deltas(conn: Any, cmd: ApplyTokenDeltas) -> int:
    """Apply queued deltas in order; one that fails is rolled back alone (savepoint), logged and dropped."""
    # The writer only locks sessions a command names directly: lock these in the same sorted order.
    ids = sorted({delta.session_id for delta in cmd.deltas})
    await conn.execute("SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE", ids)
    applied = 0
    for delta in cmd.deltas:
        try:
            async with conn.transaction():
                await update_token_counts(conn, delta)
        except Exception as exc:
            if conn.is_closed():
                raise
            log.warning("dropped a queued token delta for session %r: %s", delta.session_id, exc)
        else:
            applied += 1
    return applied
