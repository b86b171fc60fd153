"""Coalesced token accounting (queue_token_counts / flush_token_counts).

``queue_token_counts`` returns at once: the delta is validated, appended to
an in-memory queue, and a background task (``session-db-token-writer``)
drains the queue. Each drain takes everything queued, merges *adjacent*
incremental deltas of the same session and billing route, and hands the
result to the writer actor as one ``ApplyTokenDeltas`` command, so a burst
of per-call updates costs one transaction. ``absolute`` deltas are never
merged and act as barriers, so the order of effects is the order of calls.

``flush_token_counts`` waits until the queue is empty; ``close()`` flushes
(up to 10 s) before the writer stops, and the reads and writes whose result
depends on the totals (``list_sessions_rich``, ``get_session_rich_row``,
``update_session_meta``, ``update_session_model``) flush first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec

from ..commands.usage import ApplyTokenDeltas, UpdateTokenCounts
from ..facade import (
    TRANSCRIPT_PATIENCE,
    StoreBase,
    count_arg,
    opt_number,
    opt_text,
    require_id,
)
from ..home_loop import hand_off
from ..limits import finite_sum, saturating_add
from ..usage_report import usage_by_day_rows
from .listing import finite_number, flag_arg

__all__ = ["UsageMethods", "coalesce_token_deltas"]

log = logging.getLogger("hermes_state")

CLOSE_FLUSH_TIMEOUT = 10.0

_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
           "api_call_count")
_COSTS = ("estimated_cost_usd", "actual_cost_usd")
_LABELS = ("model", "cost_status", "cost_source", "pricing_version", "billing_provider", "billing_base_url",
           "billing_mode")
_FIELDS = frozenset((*_COUNTS, *_COSTS, *_LABELS, "absolute"))


def token_delta(session_id: Any, fields: dict[str, Any]) -> UpdateTokenCounts:
    """Validate ``update_token_counts`` keyword arguments into a command (``TypeError`` for unknown names)."""
    unknown = sorted(set(fields) - _FIELDS)
    if unknown:
        raise TypeError(f"queue_token_counts() got unexpected keyword argument(s): {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, value in fields.items():
        if name in _COUNTS:
            values[name] = count_arg(value, name)
        elif name in _COSTS:
            values[name] = opt_number(value, name)
        elif name in _LABELS:
            values[name] = opt_text(value, name)
        else:
            values[name] = flag_arg(value, name)
    return UpdateTokenCounts(session_id=require_id(session_id), now=time.time(), **values)


def _mergeable(a: UpdateTokenCounts, b: UpdateTokenCounts) -> bool:
    if a.absolute or b.absolute or a.session_id != b.session_id:
        return False
    return all(getattr(a, name) == getattr(b, name) for name in _LABELS)


def _add_costs(x: float | None, y: float | None) -> float | None:
    if x is None:
        return y
    return x if y is None else finite_sum(x, y)


def coalesce_token_deltas(deltas: list[UpdateTokenCounts]) -> list[UpdateTokenCounts]:
    """Merge runs of adjacent incremental deltas with the same session and labels; keep the order.

    Counts add up (saturating at the 64-bit limits, like the stored
    counters), costs add up (saturating at the largest double) ignoring None (None + None stays None), and
    the merged delta carries the latest timestamp. Absolute deltas are
    barriers and pass through unchanged.
    """
    merged: list[UpdateTokenCounts] = []
    for delta in deltas:
        if merged and _mergeable(merged[-1], delta):
            last = merged[-1]
            changes: dict[str, Any] = {
                name: saturating_add(getattr(last, name), getattr(delta, name)) for name in _COUNTS
            }
            changes.update({name: _add_costs(getattr(last, name), getattr(delta, name)) for name in _COSTS})
            merged[-1] = msgspec.structs.replace(last, now=max(last.now, delta.now), **changes)
        else:
            merged.append(delta)
    return merged


class UsageMethods(StoreBase):
    """Coalesced token accounting (queue_token_counts / flush_token_counts)."""

    # Created lazily: the constructor must stay free of I/O and event-loop objects.
    _token_queue: list[UpdateTokenCounts] | None = None
    _token_writer: asyncio.Task[None] | None = None

    async def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """Queue a token/cost delta (same keyword arguments as ``update_token_counts``). Returns None.

        Returns without waiting for the write; the delta is applied by a
        background writer, merged with adjacent deltas of the same session
        and route. Invalid arguments raise here. A delta that later fails to
        apply is logged and dropped. Once ``close()`` has started the delta is
        applied directly instead (and so fails like any call on a closed store).
        """
        delta = token_delta(session_id, kwargs)
        if self.read_only:
            raise self._backend.readonly_error()
        self._check_storable(delta)
        if self.closed:
            await self.update_token_counts(session_id, **kwargs)  # type: ignore[attr-defined]
            return
        home = await self._enter(asyncio.get_running_loop())
        if home is not None:  # the queue and its writer task live on the home loop
            await hand_off(home, self.queue_token_counts(session_id, **kwargs))
            return
        if self._token_queue is None:
            self._token_queue = []
        self._token_queue.append(delta)
        self._start_token_writer()

    def _start_token_writer(self) -> asyncio.Task[None]:
        task = self._token_writer
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._drain_token_queue(), name="session-db-token-writer")
            self._token_writer = task
        return task

    async def _drain_token_queue(self) -> None:
        while self._token_queue:
            batch, self._token_queue = self._token_queue, []
            deltas = coalesce_token_deltas(batch)
            try:
                await self._write(
                    ApplyTokenDeltas(deltas=tuple(deltas)), patience=TRANSCRIPT_PATIENCE, during_close=self.closed
                )
            except Exception as exc:  # never raised to callers: the deltas are dropped
                log.warning("dropped %d queued token delta(s): %s", len(batch), exc)

    async def flush_token_counts(self, timeout: float = 5.0) -> bool:
        """Wait until every queued token delta has been applied; returns False on timeout.

        Restarts the background writer if it is not running. With nothing
        queued this returns True at once, without I/O.
        """
        budget = finite_number(timeout, "timeout")
        if budget < 0:
            raise ValueError(f"timeout must be non-negative, got {timeout}")
        loop = asyncio.get_running_loop()
        if (self._token_queue or self._token_writer is not None) and loop is not self._loop and not self.closed:
            home = await self._enter(loop)
            if home is not None:
                return await hand_off(home, self.flush_token_counts(budget))
        deadline = loop.time() + budget
        while self._token_queue or (self._token_writer is not None and not self._token_writer.done()):
            task = self._token_writer
            if task is None or task.done():
                task = self._start_token_writer()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if task.get_loop() is loop:
                await asyncio.wait({task}, timeout=remaining)
            else:  # started on the loop the store moved away from; it hands its writes here
                await asyncio.sleep(min(remaining, 0.005))
        return True

    def _after_move(self, dead: bool) -> None:
        # A writer task left pending on a closed loop never runs again: start afresh here.
        task = self._token_writer
        if task is not None and dead and not task.done():
            self._token_writer = None
        super()._after_move(dead)

    async def _before_close(self) -> None:
        try:
            if not await self.flush_token_counts(CLOSE_FLUSH_TIMEOUT):
                left = len(self._token_queue or ())
                log.warning("close(): queued token deltas not persisted within %.0f s (%d left)",
                            CLOSE_FLUSH_TIMEOUT, left)
        finally:
            await super()._before_close()

    # Writes whose effect depends on the totals: apply queued deltas first, so
    # a stale delta cannot land after (and undo) a model or route change.

    async def update_session_meta(self, session_id: str, model_config_json: str | None, model: str | None = None) -> None:
        """Flush queued token deltas, then overwrite ``model_config`` (see ``CoreMethods``). Returns None."""
        await self.flush_token_counts()
        await super().update_session_meta(session_id, model_config_json, model)  # type: ignore[misc]

    async def update_session_model(self, session_id: str, model: str) -> None:
        """Flush queued token deltas, then switch the session's model (see ``CoreMethods``). Returns None."""
        await self.flush_token_counts()
        await super().update_session_model(session_id, model)  # type: ignore[misc]

    # Reads of the per-model ledger (this store's additions; the reference has no such reads).

    async def get_session_model_usage(self, session_id: str) -> list[dict[str, Any]]:
        """Return the session's per-model usage ledger, one dict per model, route and task ([] when none).

        Keys: ``model, billing_provider, billing_base_url, billing_mode, task``
        (``""`` for the main conversation, else the auxiliary task),
        ``api_call_count`` and the five token counts, ``estimated_cost_usd``,
        ``actual_cost_usd``, ``cost_status``, ``cost_source``, ``first_seen``,
        ``last_seen``. Queued token counts are flushed first.
        """
        session_id = require_id(session_id)
        await self.flush_token_counts()
        return await self._query("session_model_usage", session_id)

    async def usage_by_day(self, since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
        """Return tokens and cost per UTC day and model, for sessions started in ``[since, until)``.

        Each dict has ``day`` (``YYYY-MM-DD``, the day the session started),
        ``model``, ``sessions`` (how many sessions), ``api_call_count``, the
        five token counts, ``estimated_cost_usd`` and ``actual_cost_usd``;
        ordered by day, then model. Figures come from the per-model ledger; a
        session with usage in its totals but no ledger row (absolute counts,
        imports) counts its totals under its own model. Queued token counts
        are flushed first.
        """
        start = None if since is None else finite_number(since, "since")
        end = None if until is None else finite_number(until, "until")
        await self.flush_token_counts()
        return usage_by_day_rows(await self._query("usage_rows", start, end))
