"""One message must never stall the store (issue 10 item 5).

Bounded snippets on rows with huge hit counts, searches interrupted on
cancellation and at their deadline, plain reads that never queue behind
searches, and a close() that interrupts running reads. The long statements
here are real SQLite work (a recursive count that would run for minutes),
stopped by the store's interrupt, never by the test.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import ConfigError, SearchTimeoutError, SessionDB, StoreClosedError
from hermes_state.search_text.snippet import (
    bounded_snippet,
    hits_exceed,
    phrase_pattern,
)

# The reader pool, interrupts and snippets tested here are the SQLite backend's.
pytestmark = pytest.mark.backends("sqlite")

# Counts far past anything that finishes during a test (minutes of work).
_ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM (SELECT x FROM c LIMIT 20000000000)"


def _endless(conn: Any) -> int:
    return int(conn.execute(_ENDLESS).fetchone()[0])


def _pause_then_endless(conn: Any, pause: float) -> int:
    # Cancelled during the pause no statement is running, so only the
    # per-read cancel flag (checked by the progress handler) can stop the next one.
    conn.execute("SELECT 1").fetchall()
    time.sleep(pause)
    return _endless(conn)


def _transaction_open(conn: Any) -> bool:
    return bool(conn.in_transaction)


async def _until(predicate: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def _lanes(db: SessionDB) -> list[Any]:
    return db._backend._lanes  # type: ignore[attr-defined]


async def _start(db: SessionDB, fn: Any, *args: Any, search: bool = False) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(db._backend.reader.run(fn, *args, search=search))  # type: ignore[attr-defined]
    await _until(lambda: any(lane.running is not None for lane in _lanes(db)))
    return task


# ------------------------------------------------------------ cancellation


async def test_cancelled_read_is_interrupted_and_its_connection_is_usable(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "still here")
    task = await _start(store, _endless, search=True)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Interrupted, not abandoned: the connection thread comes back at once.
    await _until(lambda: all(lane.busy == 0 for lane in _lanes(store)), 5.0)
    for lane in _lanes(store):  # every connection answers, none kept a snapshot open
        assert await store._backend.reader.run(_transaction_open) is False  # type: ignore[attr-defined]
        assert (await store.get_messages("s"))[0]["content"] == "still here"
    assert [hit["id"] for hit in await store.search_messages("still")]


async def test_cancel_between_statements_stops_the_next_statement(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    task = await _start(store, _pause_then_endless, 0.3)
    task.cancel()  # lands during the pause, when interrupt() alone would be a no-op
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: all(lane.busy == 0 for lane in _lanes(store)), 5.0)
    assert await store.get_session("s") is not None


async def test_search_deadline_raises_a_documented_error_and_the_store_stays_usable(
    db_path: Path, hermes_home: Path
) -> None:
    (hermes_home / "config.yaml").write_text("sessions:\n  search_timeout_ms: 1\n")
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        await db.append_messages_batch("s", [{"role": "user", "content": f"deploy error number {i}"} for i in range(20000)])
        with pytest.raises(SearchTimeoutError, match="search_timeout_ms=1 ms") as info:
            await db.search_messages("deploy error")
        assert isinstance(info.value, TimeoutError)
        await _until(lambda: all(lane.busy == 0 for lane in _lanes(db)), 5.0)
        assert len(await db.get_messages("s", limit=5)) == 5
        for _ in _lanes(db):
            assert await db._backend.reader.run(_transaction_open) is False  # type: ignore[attr-defined]
        db._backend.config.sessions.search_timeout_ms = 0  # type: ignore[attr-defined]  # 0: no deadline
        assert len(await db.search_messages("deploy error")) == 20
    finally:
        await db.close()
    # Nothing was left holding a snapshot: the WAL checkpoints completely.
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()


async def test_search_deadline_covers_the_wait_for_a_search_slot(db_path: Path, hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_text("sessions:\n  search_timeout_ms: 200\n")
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "deploy error")
        blocker = await _start(db, _endless, search=True)  # holds the only search slot
        with pytest.raises(SearchTimeoutError):
            await db.search_messages("deploy")
        blocker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocker
        assert [hit["content"] for hit in (await db.search_messages("deploy"))[0]["context"]] == ["deploy error"]
    finally:
        await db.close()


async def test_a_cancelled_search_is_cancelled_not_timed_out(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "deploy error")
    blocker = await _start(store, _endless, search=True)
    search = asyncio.ensure_future(store.search_messages("deploy"))
    await asyncio.sleep(0.05)
    search.cancel()
    with pytest.raises(asyncio.CancelledError):
        await search
    blocker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocker
    assert len(await store.search_messages("deploy")) == 1


@pytest.mark.parametrize("value", ["-1", "soon"])
async def test_search_timeout_config_is_validated(db_path: Path, hermes_home: Path, value: str) -> None:
    (hermes_home / "config.yaml").write_text(f"sessions:\n  search_timeout_ms: {value}\n")
    with pytest.raises(ConfigError, match="search_timeout_ms"):
        await SessionDB(db_path).get_session("s")


# ------------------------------------------------------------ pool policy


async def test_plain_reads_do_not_wait_behind_searches(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    first = await _start(store, _endless, search=True)
    second = asyncio.ensure_future(store._backend.reader.run(_endless, search=True))  # type: ignore[attr-defined]
    try:
        for _ in range(20):
            assert await store.get_session("s") is not None
        # Both searches are still running or waiting: the reads went past them.
        assert not first.done() and not second.done()
        assert sum(lane.searches for lane in _lanes(store)) == 1  # the second waits for a search slot
    finally:
        for task in (first, second):
            task.cancel()
        await asyncio.gather(first, second, return_exceptions=True)


async def test_close_interrupts_running_reads(db_path: Path) -> None:
    db = SessionDB(db_path)
    await db.create_session("s", "cli")
    search = await _start(db, _endless, search=True)
    plain = asyncio.ensure_future(db._backend.reader.run(_endless))  # type: ignore[attr-defined]
    await _until(lambda: all(lane.running is not None for lane in _lanes(db)))
    await asyncio.wait_for(db.close(), 30)  # the reads alone would run for minutes
    for task in (search, plain):
        with pytest.raises(StoreClosedError):
            await task


# -------------------------------------------------------- bounded snippets


async def test_row_with_a_hundred_thousand_hits_searches_quickly(store: SessionDB) -> None:
    # snippet() on this row would take minutes (16,000 hits: about a second,
    # four times as long per doubling); the default 10 s deadline would fire.
    await store.create_session("log", "cli")
    await store.create_session("other", "cli")
    noisy = "".join(f"line {i} error: retry\n" for i in range(100_000))
    big = await store.append_message("log", "tool", noisy, tool_name="terminal")
    small = await store.append_message("other", "user", "one error here")
    for query in ("error", "err*", '"error: retry"', "retry error"):
        hits = await store.search_messages(query, limit=5)
        by_id = {hit["id"]: hit for hit in hits}
        assert big in by_id, query
        snippet = by_id[big]["snippet"]
        assert snippet.startswith(("...", "line 0"))
        assert ">>>" in snippet and snippet.endswith("...")
        assert len(snippet) < 600
    hits = await store.search_messages("error", limit=5)
    assert {hit["id"] for hit in hits} == {big, small}
    assert next(hit for hit in hits if hit["id"] == small)["snippet"] == "one >>>error<<< here"  # snippet() as before
    assert [hit["context"][0]["content"] for hit in hits if hit["id"] == big] == [noisy[:200]]
    bare = await store.search_messages("error", limit=5, fields=["id", "session_id"])
    assert {tuple(hit) for hit in bare} == {("id", "session_id")}


async def test_substring_fallback_on_a_row_with_many_hits_searches_quickly(store: SessionDB) -> None:
    # "rror" matches no whole word, so the trigram index answers (spec 4.3);
    # 60,000 hits in one row would keep snippet() busy for about a minute.
    await store.create_session("chat", "cli")
    pasted = "".join(f"{i} error " for i in range(60_000))
    big = await store.append_message("chat", "user", pasted)
    hits = await store.search_messages("rror", limit=5)
    assert [hit["id"] for hit in hits] == [big]
    snippet = hits[0]["snippet"]
    assert snippet.count("e>>>rror<<<") >= 3 and snippet.endswith("...")
    assert len(snippet) < 200


async def test_long_rows_are_read_in_part_without_changing_results(store: SessionDB) -> None:
    # Index routes read the first 64 KiB of a hit; what lies beyond still counts.
    await store.create_session("s", "cli")
    late = "x " * 40_000 + "the needle here"
    late_id = await store.append_message("s", "user", late)
    parts = [{"type": "text", "text": "needle first " + "y" * 70_000}]
    parts_id = await store.append_message("s", "user", parts)
    nul = "needle\x00" + "z " * 40_000
    nul_id = await store.append_message("s", "assistant", nul)
    hits = {hit["id"]: hit for hit in await store.search_messages("needle")}
    assert set(hits) == {late_id, parts_id, nul_id}
    assert hits[late_id]["snippet"].endswith("the >>>needle<<< here")
    window = {hit_id: hit["context"] for hit_id, hit in hits.items()}
    assert window[late_id][0] == {"role": "user", "content": late[:200]}
    assert window[late_id][1] == {"role": "user", "content": ("needle first " + "y" * 70_000)[:200]}
    assert window[parts_id][2] == {"role": "assistant", "content": nul[:200]}
    assert [m["content"] for m in await store.get_messages("s")] == [late, parts, nul]


async def test_without_the_snippet_field_no_snippet_is_built(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "alpha beta")
    rows = await store._query(  # type: ignore[attr-defined]
        "search_messages_rows", "alpha", None, None, None, 5, 0, None, False, False, False, False, 1e12
    )
    assert [row["snippet"] for row in rows] == [None]


def test_phrase_pattern_reads_the_positive_phrases() -> None:
    pattern = phrase_pattern('"docker compose" NOT legacy kube* OR nginx', substring=False)
    assert pattern is not None
    text = "Docker-compose up; kubectl and kubernetes behind NGINX, legacy off"
    assert [m.group() for m in pattern.finditer(text)] == ["Docker-compose", "kubectl", "kubernetes", "NGINX"]
    assert phrase_pattern("NOT AND", substring=False) is None
    substring = phrase_pattern('"rror" AND "ocke"', substring=True)
    assert substring is not None
    assert [m.group() for m in substring.finditer("ERROR docker")] == ["RROR", "ocke"]


def test_bounded_snippet_marks_hits_in_a_forty_token_window() -> None:
    words = [f"w{i}" for i in range(200)]
    words[100] = "needle"
    words[105] = "needle"
    text = " ".join(words)
    pattern = phrase_pattern("needle", substring=False)
    assert pattern is not None
    snippet = bounded_snippet(text, pattern, substring=False)
    assert snippet is not None
    assert snippet.startswith("...") and snippet.endswith("...")
    assert snippet.count(">>>needle<<<") == 2
    assert len(snippet.strip(".").split()) == 40
    # A short text is returned whole, without ellipses.
    assert bounded_snippet("a needle here", pattern, substring=False) == "a >>>needle<<< here"
    assert bounded_snippet("no match", pattern, substring=False) is None


def test_hit_counting_stops_at_the_limit() -> None:
    pattern = phrase_pattern("x", substring=False)
    assert pattern is not None
    assert hits_exceed(pattern, ["x " * 10, "x"], limit=10)
    assert not hits_exceed(pattern, ["x " * 10], limit=10)


def _own_nice(conn: Any) -> int:
    import os
    import threading

    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is a Linux feature")
async def test_search_connections_run_at_a_lower_cpu_priority(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    lanes = _lanes(store)
    assert [lane.background for lane in lanes] == [False] + [True] * (len(lanes) - 1)
    # A search goes to a background connection; its thread is niced, the first one is not.
    search_nice = await store._backend.reader.run(_own_nice, search=True)  # type: ignore[attr-defined]
    plain_nice = await store._backend.reader.run(_own_nice)  # type: ignore[attr-defined]
    assert search_nice > plain_nice
