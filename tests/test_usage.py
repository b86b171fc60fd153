"""Queued token accounting: coalescing, ordering, flushing, close, failures, and the usage ledger."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, StoreClosedError
from hermes_state.commands.usage import UpdateTokenCounts
from hermes_state.limits import INT64_MAX
from hermes_state.methods.usage import coalesce_token_deltas
from hermes_state.sqlite.driver import driver_module
from tests.raw_sql import fetch_rows, is_postgres, raw_exec



def delta(session_id: str = "s", **fields: Any) -> UpdateTokenCounts:
    return UpdateTokenCounts(session_id=session_id, now=fields.pop("now", 1.0), **fields)


async def ledger(db: SessionDB) -> list[tuple[Any, ...]]:
    return await fetch_rows(
        db,
        "SELECT session_id, model, billing_provider, task, api_call_count, input_tokens, output_tokens, "
        "estimated_cost_usd FROM session_model_usage ORDER BY session_id, model, task",
    )


# ------------------------------------------------------------------ coalescing


def test_coalesce_merges_only_adjacent_compatible_incremental_deltas() -> None:
    merged = coalesce_token_deltas([
        delta(input_tokens=1, api_call_count=1, estimated_cost_usd=0.5, now=1),
        delta(input_tokens=2, output_tokens=3, api_call_count=1, actual_cost_usd=1.0, now=3),
        delta(input_tokens=4, now=2),
        delta(input_tokens=8, model="other"),  # different label: new run
        delta(input_tokens=16, model="other"),
        delta("t", input_tokens=32, model="other"),  # different session
        delta("t", input_tokens=64, model="other", absolute=True),  # barrier
        delta("t", input_tokens=128, model="other"),
        delta("t", input_tokens=256, model="other"),
    ])
    summary = [(d.session_id, d.model, d.input_tokens, d.absolute) for d in merged]
    assert summary == [
        ("s", None, 7, False), ("s", "other", 24, False), ("t", "other", 32, False),
        ("t", "other", 64, True), ("t", "other", 384, False),
    ]
    first = merged[0]
    assert (first.output_tokens, first.api_call_count, first.now) == (3, 2, 3)
    assert (first.estimated_cost_usd, first.actual_cost_usd) == (0.5, 1.0)
    assert merged[1].estimated_cost_usd is None and merged[1].actual_cost_usd is None
    assert coalesce_token_deltas([]) == []


# ------------------------------------------------------------------ queue


async def test_queued_deltas_sum_up_in_one_transaction(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    batches_before = store._actor.batches
    for _ in range(200):
        await store.queue_token_counts("s", input_tokens=2, output_tokens=1, model="m", billing_provider="p",
                                       api_call_count=1, estimated_cost_usd=0.25)
    assert await store.flush_token_counts() is True
    s = await store.get_session("s")
    assert s is not None
    assert (s["input_tokens"], s["output_tokens"], s["api_call_count"]) == (400, 200, 200)
    assert s["estimated_cost_usd"] == pytest.approx(50.0)
    assert (s["model"], s["billing_provider"]) == ("m", "p")
    assert await ledger(store) == [("s", "m", "p", "", 200, 400, 200, pytest.approx(50.0))]
    # 200 awaited calls, but the drains coalesced them into a handful of transactions
    assert store._actor.batches - batches_before <= 5


async def test_absolute_deltas_are_barriers_in_call_order(store: SessionDB) -> None:
    await store.queue_token_counts("s", input_tokens=5)
    await store.queue_token_counts("s", input_tokens=100, absolute=True)
    await store.queue_token_counts("s", input_tokens=3)
    assert await store.flush_token_counts()
    s = await store.get_session("s")
    assert s is not None and s["input_tokens"] == 103 and s["source"] == "unknown"  # auto-created
    # the ledger only sees incremental deltas
    assert await ledger(store) == [("s", "unknown", "", "", 0, 8, 0, 0.0)]


async def test_flush_without_anything_queued_does_no_io(db_path: Path) -> None:
    db = SessionDB(db_path)
    try:
        assert await db.flush_token_counts() is True
        assert await db.flush_token_counts(0) is True
        assert not db_path.exists()
        with pytest.raises(ValueError, match="timeout"):
            await db.flush_token_counts(-1)
    finally:
        await db.close()


@pytest.mark.backends("sqlite")  # a SQLite file lock; the PostgreSQL twin holds the session row lock
async def test_flush_times_out_while_the_file_is_locked(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    blocker = driver_module().connect(str(store.db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        await store.queue_token_counts("s", input_tokens=1)
        assert await store.flush_token_counts(timeout=0.3) is False
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.flush_token_counts(timeout=30) is True
    assert (await store.get_session("s") or {})["input_tokens"] == 1


async def test_close_flushes_the_queue(db_path: Path) -> None:
    db = SessionDB(db_path)
    await db.create_session("s", "cli")
    for i in range(50):
        await db.queue_token_counts("s", input_tokens=1, model="m" if i % 2 else "n")
    await db.close()
    with pytest.raises(StoreClosedError):
        await db.queue_token_counts("s", input_tokens=1)
    reopened = SessionDB(db_path)
    try:
        s = await reopened.get_session("s")
        assert s is not None and s["input_tokens"] == 50
        assert [(r[1], r[5]) for r in await ledger(reopened)] == [("m", 25), ("n", 25)]
    finally:
        await reopened.close()


async def test_a_failing_delta_is_dropped_alone(store: SessionDB, caplog: pytest.LogCaptureFixture) -> None:
    await store.create_session("good", "cli")
    await store.create_session("bad", "cli")
    if is_postgres(store):  # the same refusal in each dialect's trigger language
        await raw_exec(store, "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS "
                              "$$ BEGIN RAISE EXCEPTION 'refused by test trigger'; END $$")
        await raw_exec(store, "CREATE TRIGGER refuse_bad BEFORE UPDATE OF input_tokens ON sessions FOR EACH ROW "
                              "WHEN (new.id = 'bad') EXECUTE FUNCTION refuse_bad()")
    else:
        await raw_exec(store, "CREATE TRIGGER refuse_bad BEFORE UPDATE OF input_tokens ON sessions "
                              "WHEN new.id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused by test trigger'); END")
    await store.queue_token_counts("good", input_tokens=1)
    await store.queue_token_counts("bad", input_tokens=1)
    await store.queue_token_counts("good", input_tokens=2)
    assert await store.flush_token_counts()
    assert (await store.get_session("good") or {})["input_tokens"] == 3
    assert (await store.get_session("bad") or {})["input_tokens"] == 0
    assert "refused by test trigger" in caplog.text
    assert [r[0] for r in await ledger(store)] == ["good"]  # the bad delta's ledger row rolled back too


@pytest.mark.backends("postgres")
async def test_flush_times_out_while_another_worker_holds_the_session(store: SessionDB) -> None:
    import asyncpg

    from hermes_state.postgres.dsn import asyncpg_dsn

    await store.create_session("s", "cli")
    blocker = await asyncpg.connect(asyncpg_dsn(store._dsn))  # type: ignore[attr-defined]
    try:
        holding = blocker.transaction()
        await holding.start()
        await blocker.execute("SELECT id FROM sessions WHERE id = 's' FOR UPDATE")
        await store.queue_token_counts("s", input_tokens=1)
        assert await store.flush_token_counts(timeout=0.3) is False
        await holding.rollback()
    finally:
        await blocker.close()
    assert await store.flush_token_counts(timeout=30) is True
    assert (await store.get_session("s") or {})["input_tokens"] == 1


async def test_model_switch_and_reads_flush_first(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    # A stale queued delta of the old route must land before the switch, not after it.
    await store.queue_token_counts("s", input_tokens=10, model="old", billing_provider="p-old", api_call_count=1)
    await store.update_session_model("s", "new")
    s = await store.get_session("s")
    assert s is not None and s["model"] == "new" and s["input_tokens"] == 10
    await store.queue_token_counts("s", input_tokens=5, model="new", billing_provider="p-new", api_call_count=1)
    rows = await store.list_sessions_rich()
    assert rows[0]["input_tokens"] == 15
    await store.queue_token_counts("s", output_tokens=7)
    rich = await store.get_session_rich_row("s")
    assert rich is not None and rich["output_tokens"] == 7
    await store.queue_token_counts("s", output_tokens=1)
    await store.update_session_meta("s", '{"k": 1}')
    s = await store.get_session("s")
    assert s is not None and s["output_tokens"] == 8 and s["model_config"] == '{"k": 1}'


async def test_bad_arguments_are_rejected_before_queueing(store: SessionDB) -> None:
    with pytest.raises(TypeError, match="bogus"):
        await store.queue_token_counts("s", bogus=1)
    with pytest.raises(TypeError, match="input_tokens"):
        await store.queue_token_counts("s", input_tokens="5")
    with pytest.raises(TypeError, match="estimated_cost_usd"):
        await store.queue_token_counts("s", estimated_cost_usd="0.1")
    with pytest.raises(TypeError, match="absolute"):
        await store.queue_token_counts("s", absolute="yes")
    with pytest.raises(TypeError, match="session_id"):
        await store.queue_token_counts(None)  # type: ignore[arg-type]
    assert await store.flush_token_counts()
    assert await store.get_session("s") is None


async def test_read_only_store_refuses_queued_counts(db_path: Path) -> None:
    writer = SessionDB(db_path)
    await writer.create_session("s", "cli")
    await writer.close()
    reader = SessionDB(db_path, read_only=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            await reader.queue_token_counts("s", input_tokens=1)
    finally:
        await reader.close()


async def test_concurrent_producers_and_auxiliary_usage(store: SessionDB) -> None:
    async def producer(sid: str) -> None:
        for i in range(40):
            await store.queue_token_counts(sid, input_tokens=1, output_tokens=i % 3, model="m")
            if i % 10 == 0:
                await asyncio.sleep(0)

    await asyncio.gather(*(producer(f"s{n}") for n in range(5)))
    await store.record_auxiliary_usage("s0", "title", model="small", input_tokens=3, estimated_cost_usd=0.01)
    assert await store.flush_token_counts()
    totals = [(await store.get_session(f"s{n}") or {})["input_tokens"] for n in range(5)]
    assert totals == [40] * 5
    rows = await ledger(store)
    assert ("s0", "small", "", "title", 1, 3, 0, pytest.approx(0.01)) in rows
    assert sum(1 for r in rows if r[3] == "") == 5


async def test_auxiliary_usage_stores_its_api_call_count(store: SessionDB) -> None:
    """``record_auxiliary_usage(api_call_count=)`` (upstream 2026-08) is stored on both backends (upstream's PG kept 1)."""
    await store.record_auxiliary_usage("s", "title", model="small", input_tokens=3)  # the default is one call
    await store.record_auxiliary_usage("s", "title", model="small", input_tokens=4, api_call_count=5)
    await store.record_auxiliary_usage("s", "compress", model="small", output_tokens=2, api_call_count=0)
    rows = await ledger(store)
    assert ("s", "small", "", "title", 6, 7, 0, 0.0) in rows
    assert ("s", "small", "", "compress", 0, 0, 2, 0.0) in rows
    session = await store.get_session("s") or {}
    assert (session["api_call_count"], session["input_tokens"]) == (0, 0)  # session totals untouched
    for _ in range(2):
        await store.record_auxiliary_usage("s", "vision", model="v", api_call_count=INT64_MAX)
    assert [r[4] for r in await ledger(store) if r[3] == "vision"] == [INT64_MAX]  # saturates like the others


async def test_auxiliary_api_call_count_is_checked_at_the_call_site(store: SessionDB) -> None:
    bad_values: list[tuple[Any, type[Exception]]] = [
        ("5", TypeError), (2.0, TypeError), (True, TypeError), (INT64_MAX + 1, ValueError),
    ]
    for bad, error in bad_values:
        with pytest.raises(error, match="api_call_count"):
            await store.record_auxiliary_usage("s", "title", api_call_count=bad)  # type: ignore[arg-type]
    assert await store.get_session("s") is None  # nothing was queued
    await store.record_auxiliary_usage("", "title", api_call_count=3)  # blank ids stay a no-op
    assert await ledger(store) == []
