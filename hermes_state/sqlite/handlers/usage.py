"""Handlers for token and cost accounting."""

from __future__ import annotations

import logging
from typing import Any

from ...commands.usage import ApplyTokenDeltas, RecordAuxiliaryUsage, UpdateTokenCounts
from ...limits import FLOAT_MAX
from .registry import handles

log = logging.getLogger("hermes_state.usage")

_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def _finite(total: str) -> str:
    """SQL clamping a cost sum to the finite doubles (a float overflow would store inf)."""
    return f"MAX(MIN({total}, {FLOAT_MAX!r}), {-FLOAT_MAX!r})"


# Token counters saturate at 2**63 - 1 instead of turning into floats: in
# SQLite an integer overflow in ``+`` yields a REAL, and CAST clamps a REAL to
# the signed 64-bit range. Deltas are 64-bit ints (checked at the call site),
# so a sum that fits stays an exact integer and one that does not is clamped.
# Costs saturate at the largest finite double the same way (``_finite``).
_LEDGER_UPSERT_SQL = f"""
INSERT INTO session_model_usage (
    session_id, model, billing_provider, billing_base_url, billing_mode, task,
    api_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status, cost_source,
    first_seen, last_seen
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(session_id, model, billing_provider, billing_base_url, billing_mode, task) DO UPDATE SET
    api_call_count = CAST(api_call_count + excluded.api_call_count AS INTEGER),
    input_tokens = CAST(input_tokens + excluded.input_tokens AS INTEGER),
    output_tokens = CAST(output_tokens + excluded.output_tokens AS INTEGER),
    cache_read_tokens = CAST(cache_read_tokens + excluded.cache_read_tokens AS INTEGER),
    cache_write_tokens = CAST(cache_write_tokens + excluded.cache_write_tokens AS INTEGER),
    reasoning_tokens = CAST(reasoning_tokens + excluded.reasoning_tokens AS INTEGER),
    estimated_cost_usd = {_finite('estimated_cost_usd + excluded.estimated_cost_usd')},
    actual_cost_usd = {_finite('actual_cost_usd + excluded.actual_cost_usd')},
    cost_status = COALESCE(excluded.cost_status, cost_status),
    cost_source = COALESCE(excluded.cost_source, cost_source),
    last_seen = excluded.last_seen
"""


def ensure_session_row(conn: Any, session_id: str, model: str | None, now: float) -> None:
    """Create the session with source ``unknown`` if missing, else fill a NULL model."""
    conn.execute(
        "INSERT INTO sessions (id, source, model, started_at) VALUES (?, 'unknown', ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET model = COALESCE(sessions.model, excluded.model)",
        (session_id, model, now),
    )


@handles(UpdateTokenCounts)
def update_token_counts(conn: Any, cmd: UpdateTokenCounts) -> None:
    ensure_session_row(conn, cmd.session_id, cmd.model, cmd.now)
    tokens = [getattr(cmd, f) or 0 for f in _TOKEN_FIELDS]
    has_usage = bool(any(tokens) or cmd.api_call_count or cmd.estimated_cost_usd or cmd.actual_cost_usd)
    stored = conn.execute(
        "SELECT api_call_count, model, billing_provider, billing_base_url, billing_mode FROM sessions WHERE id = ?",
        (cmd.session_id,),
    ).fetchone()
    if (
        has_usage
        and not (stored[0] or 0)
        and cmd.model
        and cmd.billing_provider
        and (cmd.model != stored[1] or cmd.billing_provider != stored[2])
    ):
        # The first call that is actually billed decides the session's route.
        conn.execute(
            "UPDATE sessions SET model = ?, billing_provider = ?, billing_base_url = ?, billing_mode = ? WHERE id = ?",
            (cmd.model, cmd.billing_provider, cmd.billing_base_url, cmd.billing_mode, cmd.session_id),
        )
    if cmd.absolute:
        counters = ", ".join(f"{f} = ?" for f in _TOKEN_FIELDS)
        conn.execute(
            f"UPDATE sessions SET {counters}, estimated_cost_usd = ?, "
            "actual_cost_usd = COALESCE(?, actual_cost_usd), api_call_count = ? WHERE id = ?",
            (*tokens, cmd.estimated_cost_usd or 0.0, cmd.actual_cost_usd, cmd.api_call_count, cmd.session_id),
        )
    else:
        counters = ", ".join(f"{f} = CAST(COALESCE({f}, 0) + ? AS INTEGER)" for f in _TOKEN_FIELDS)
        conn.execute(
            f"UPDATE sessions SET {counters}, "
            f"estimated_cost_usd = {_finite('COALESCE(estimated_cost_usd, 0) + COALESCE(?, 0)')}, "
            "actual_cost_usd = CASE WHEN ? IS NULL THEN actual_cost_usd "
            f"ELSE {_finite('COALESCE(actual_cost_usd, 0) + ?')} END, "
            "api_call_count = CAST(COALESCE(api_call_count, 0) + ? AS INTEGER) WHERE id = ?",
            (*tokens, cmd.estimated_cost_usd, cmd.actual_cost_usd, cmd.actual_cost_usd, cmd.api_call_count, cmd.session_id),
        )
    conn.execute(
        "UPDATE sessions SET cost_status = COALESCE(?, cost_status), cost_source = COALESCE(?, cost_source), "
        "pricing_version = COALESCE(?, pricing_version) WHERE id = ?",
        (cmd.cost_status, cmd.cost_source, cmd.pricing_version, cmd.session_id),
    )
    if has_usage:
        conn.execute(
            "UPDATE sessions SET billing_provider = COALESCE(billing_provider, ?), "
            "billing_base_url = COALESCE(billing_base_url, ?), billing_mode = COALESCE(billing_mode, ?), "
            "model = COALESCE(model, ?) WHERE id = ?",
            (cmd.billing_provider, cmd.billing_base_url, cmd.billing_mode, cmd.model, cmd.session_id),
        )
    if not cmd.absolute and (any(tokens) or cmd.api_call_count or cmd.estimated_cost_usd):
        route = conn.execute(
            "SELECT model, billing_provider, billing_base_url, billing_mode FROM sessions WHERE id = ?",
            (cmd.session_id,),
        ).fetchone()
        conn.execute(
            _LEDGER_UPSERT_SQL,
            (
                cmd.session_id,
                cmd.model or route[0] or "unknown",
                cmd.billing_provider or route[1] or "",
                cmd.billing_base_url or route[2] or "",
                cmd.billing_mode or route[3] or "",
                "",
                cmd.api_call_count or 0,
                *tokens,
                cmd.estimated_cost_usd or 0.0,
                cmd.actual_cost_usd or 0.0,
                cmd.cost_status,
                cmd.cost_source,
                cmd.now,
                cmd.now,
            ),
        )


@handles(RecordAuxiliaryUsage)
def record_auxiliary_usage(conn: Any, cmd: RecordAuxiliaryUsage) -> None:
    ensure_session_row(conn, cmd.session_id, None, cmd.now)
    conn.execute(
        _LEDGER_UPSERT_SQL,
        (
            cmd.session_id,
            cmd.model or "unknown",
            cmd.billing_provider or "",
            cmd.billing_base_url or "",
            "",
            cmd.task,
            cmd.api_call_count,
            cmd.input_tokens or 0,
            cmd.output_tokens or 0,
            cmd.cache_read_tokens or 0,
            cmd.cache_write_tokens or 0,
            cmd.reasoning_tokens or 0,
            cmd.estimated_cost_usd or 0.0,
            0.0,
            None,
            None,
            cmd.now,
            cmd.now,
        ),
    )


@handles(ApplyTokenDeltas)
def apply_token_deltas(conn: Any, cmd: ApplyTokenDeltas) -> int:
    """Apply queued deltas in order; one that fails is rolled back alone, logged and dropped."""
    applied = 0
    for delta in cmd.deltas:
        conn.execute("SAVEPOINT hermes_token_delta")
        try:
            update_token_counts(conn, delta)
        except Exception as exc:
            if not conn.in_transaction:  # SQLite ended the whole transaction (disk full, I/O error)
                raise
            conn.execute("ROLLBACK TO hermes_token_delta")
            log.warning("dropped a queued token delta for session %r: %s", delta.session_id, exc)
        else:
            applied += 1
        conn.execute("RELEASE hermes_token_delta")
    return applied
