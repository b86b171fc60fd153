"""Commands that account tokens and costs."""

from __future__ import annotations

from .base import Command


class UpdateTokenCounts(Command, frozen=True):
    """Add (or, with ``absolute``, set) a session's usage totals.

    Creates the session with source ``"unknown"`` when it does not exist, and
    feeds the per-model ledger for incremental deltas.
    """

    session_id: str
    now: float
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_cost_usd: float | None = None
    actual_cost_usd: float | None = None
    cost_status: str | None = None
    cost_source: str | None = None
    pricing_version: str | None = None
    billing_provider: str | None = None
    billing_base_url: str | None = None
    billing_mode: str | None = None
    api_call_count: int = 0
    absolute: bool = False


class RecordAuxiliaryUsage(Command, frozen=True):
    """Add an auxiliary task's calls and tokens to the per-model ledger only."""

    session_id: str
    task: str
    now: float
    model: str | None = None
    billing_provider: str | None = None
    billing_base_url: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_cost_usd: float | None = None
    api_call_count: int = 1


class ApplyTokenDeltas(Command, frozen=True):
    """Apply queued (already coalesced) token deltas in order, one savepoint each.

    A delta that fails is rolled back alone, logged and dropped. Resolves to
    the number of deltas applied.
    """

    deltas: tuple[UpdateTokenCounts, ...]
