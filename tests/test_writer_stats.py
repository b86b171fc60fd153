"""``writer_stats()``: the write path's counters, the same keys on both backends."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hermes_state.errors import SessionNotFoundError

KEYS = {
    "batches", "commands", "commands_per_batch", "running", "queue_depth", "batches_applied", "commands_applied", "commands_per_batch_mean", "commands_per_batch_max",
    "commit_latency_p50_ms", "commit_latency_p99_ms", "latency_window", "failed_commands", "retried_batches",
    "reconnects", "read_routing",
}


async def test_counts_batches_commands_failures_and_latency(store: Any) -> None:
    fresh = await store.writer_stats()
    assert set(fresh) == KEYS
    assert (fresh["batches_applied"], fresh["commit_latency_p50_ms"], fresh["reconnects"]) == (0, None, 0)
    assert fresh["read_routing"] is None  # no read replicas
    await store.create_session("s", "cli")
    await asyncio.gather(*(store.append_message("s", "user", f"m{i}") for i in range(40)))
    with pytest.raises(SessionNotFoundError):
        await store.append_message("missing", "user", "x")
    stats = await store.writer_stats()
    assert stats["commands_applied"] == 42
    assert 3 <= stats["batches_applied"] <= 42
    assert stats["commands_per_batch_max"] > 1  # concurrent appends shared a commit
    assert stats["commands_per_batch_mean"] == stats["commands_applied"] / stats["batches_applied"]
    assert stats["failed_commands"] == 1
    assert stats["queue_depth"] == 0
    assert stats["latency_window"] == stats["batches_applied"]
    assert 0 < stats["commit_latency_p50_ms"] <= stats["commit_latency_p99_ms"]
    assert len(await store.get_messages("s")) == 40


async def test_logged_at_debug_once_per_interval(store: Any, caplog: Any) -> None:
    await store.create_session("s", "cli")
    store._actor.log_interval = 0.0  # every batch is "a minute later"
    with caplog.at_level(logging.DEBUG, logger="hermes_state.actor"):
        await store.append_message("s", "user", "a")
    lines = [r for r in caplog.records if r.name == "hermes_state.actor" and "writer stats" in r.getMessage()]
    assert lines and "batches_applied" in lines[-1].getMessage()
    caplog.clear()
    store._actor.log_interval = 3600.0
    with caplog.at_level(logging.DEBUG, logger="hermes_state.actor"):
        await store.append_message("s", "user", "b")
    assert not [r for r in caplog.records if "writer stats" in r.getMessage()]
