"""Fault and concurrency tests for the store: real files, real subprocesses, no mocks.

Covers concurrent appends, caller cancellation mid-batch, poisoned commands
inside one group commit, close while writes are queued, reopening a file
from a second store (sequentially and concurrently), a writer process killed
with SIGKILL, and argument errors rejected before anything is queued.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hermes_state import (
    CompressionSessionClosedError,
    SessionDB,
    SessionNotFoundError,
    StoreClosedError,
)

from .conftest import BACKENDS
from .raw_sql import is_postgres, open_store, store_target

# What a write on a read-only store raises: SQLite's own error, or PermissionError before any I/O (spec §3.8).
READ_ONLY_REFUSALS: dict[str, tuple[type[Exception], str]] = {
    "sqlite": (sqlite3.OperationalError, "^attempt to write a readonly database$"),
    "postgres": (PermissionError, "^read-only PostgreSQL SessionDB$"),
}


REPO_ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------- helpers


async def _rows(db: SessionDB, session_id: str) -> list[dict[str, Any]]:
    return await db.get_messages(session_id, include_inactive=True)


async def _assert_counter_matches_rows(db: SessionDB, session_id: str) -> int:
    rows = await _rows(db, session_id)
    session = await db.get_session(session_id)
    assert session is not None
    assert session["message_count"] == len(rows), (session_id, session["message_count"], len(rows))
    assert await db.message_count(session_id) == len(rows)
    return len(rows)


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """A database several stores (and processes) open: a SQLite path or a PostgreSQL DSN with its own schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return str(db_path)


async def _start_busy_writer(db: SessionDB, session_id: str, n_rows: int, tag: str) -> asyncio.Task[int]:
    """Queue one big append_messages_batch and return once the writer thread is running it."""
    batches_before = db._actor.batches
    big = asyncio.ensure_future(
        db.append_messages_batch(session_id, [{"role": "assistant", "content": f"{tag}-{i}"} for i in range(n_rows)])
    )
    await asyncio.sleep(0)  # big encodes its rows and queues the command
    for _ in range(100):
        await asyncio.sleep(0)
        if db._actor._queue.qsize() == 0:
            break
    assert db._actor._queue.qsize() == 0, "writer did not take the big batch"
    assert not big.done() and db._actor.batches == batches_before, "big batch finished too fast to test against"
    return big


def _integrity_check(path: Path) -> str:
    """Run PRAGMA integrity_check with the stdlib driver, or pysqlite3 if stdlib cannot read the file."""
    try:
        conn = sqlite3.connect(str(path))
        try:
            return conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        from pysqlite3 import dbapi2  # type: ignore[import-not-found]

        conn = dbapi2.connect(str(path))
        try:
            return conn.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            conn.close()


# ------------------------------------------------- 1. concurrent appends


async def test_concurrent_appends_many_sessions_and_one_shared(store: SessionDB) -> None:
    per_task = 30
    n_tasks = 100
    own = [f"own-{i}" for i in range(n_tasks)]
    shared = "shared"
    await asyncio.gather(*(store.create_session(s, "cli") for s in [*own, shared]))
    batches0, commands0 = store._actor.batches, store._actor.commands

    async def writer(session_id: str, tag: str) -> list[int]:
        ids = []
        for k in range(per_task):
            ids.append(await store.append_message(session_id, "user" if k % 2 == 0 else "assistant", f"{tag}|{k}"))
        return ids

    own_tasks = [writer(own[i], f"own{i}") for i in range(n_tasks)]
    shared_tasks = [writer(shared, f"sh{i}") for i in range(n_tasks)]
    results = await asyncio.gather(*own_tasks, *shared_tasks)

    all_ids = [i for ids in results for i in ids]
    assert len(all_ids) == 2 * n_tasks * per_task
    assert len(set(all_ids)) == len(all_ids), "append_message returned duplicate ids"
    for ids in results:
        assert ids == sorted(ids) and len(set(ids)) == len(ids), "a task's ids are not strictly increasing"

    # Group commit really happened: far fewer transactions than commands.
    applied = store._actor.commands - commands0
    assert applied == len(all_ids)
    assert store._actor.batches - batches0 < applied

    for i, session_id in enumerate(own):
        rows = await _rows(store, session_id)
        assert len(rows) == per_task
        assert await _assert_counter_matches_rows(store, session_id) == per_task
        assert [r["content"] for r in rows] == [f"own{i}|{k}" for k in range(per_task)]
        assert [r["id"] for r in rows] == results[i]
        assert [r["role"] for r in rows] == ["user" if k % 2 == 0 else "assistant" for k in range(per_task)]

    shared_rows = await _rows(store, shared)
    assert len(shared_rows) == n_tasks * per_task
    assert await _assert_counter_matches_rows(store, shared) == n_tasks * per_task
    by_id = {r["id"]: r for r in shared_rows}
    for t in range(n_tasks):
        ids = results[n_tasks + t]
        # the returned ids are exactly this task's rows, in the order it wrote them
        assert [by_id[i]["content"] for i in ids] == [f"sh{t}|{k}" for k in range(per_task)]
        mine = [r["content"] for r in shared_rows if r["content"].startswith(f"sh{t}|")]
        assert mine == [f"sh{t}|{k}" for k in range(per_task)]
    assert await store.message_count() == len(all_ids)


# ------------------------------------------------------ 2. cancellation


async def test_cancel_callers_while_writer_busy(store: SessionDB) -> None:
    sid = "cancel-busy"
    await store.create_session(sid, "cli")
    big_rows = 20000
    big = await _start_busy_writer(store, sid, big_rows, "big")
    batches_at_start = store._actor.batches

    def spawn(group: str, n: int) -> list[asyncio.Task[int]]:
        return [asyncio.ensure_future(store.append_message(sid, "user", f"{group}-{i}")) for i in range(n)]

    group_a = spawn("A", 40)  # cancelled before they ever run: never queued
    for t in group_a:
        t.cancel()
    group_b = spawn("B", 60)  # cancelled while queued behind the busy writer: withdrawn
    group_c = spawn("C", 60)  # cancelled after the writer took them: commit, result discarded
    group_d = spawn("D", 60)  # never cancelled
    await asyncio.sleep(0)
    assert store._actor._queue.qsize() == len(group_b) + len(group_c) + len(group_d)
    assert not big.done() and store._actor.batches == batches_at_start, "writer was not busy while cancelling"
    for t in group_b:
        t.cancel()
    big.cancel()  # already taken by the writer: must still commit whole

    # The writer step that finishes the big batch also takes the next batch (C, D and the
    # withdrawn B) and hands it to the connection thread. Poll every loop iteration so C
    # is cancelled after it was taken but before that second batch can possibly resolve.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while store._actor.batches == batches_at_start:
        assert loop.time() < deadline, "big batch never finished"
        await asyncio.sleep(0)
    assert store._actor.batches == batches_at_start + 1
    assert not any(t.done() for t in group_c + group_d)
    for t in group_c:
        t.cancel()

    results = await asyncio.gather(*group_a, *group_b, *group_c, *group_d, big, return_exceptions=True)
    ra, rb, rc, rd = (
        results[:40],
        results[40:100],
        results[100:160],
        results[160:220],
    )
    assert isinstance(results[-1], asyncio.CancelledError)
    assert all(isinstance(r, asyncio.CancelledError) for r in ra + rb + rc)
    assert all(isinstance(r, int) for r in rd)
    assert len(set(rd)) == len(rd)

    rows = await _rows(store, sid)
    contents = [r["content"] for r in rows]
    by_id = {r["id"]: r for r in rows}
    # Every acknowledged id is present with its content.
    for i, rid in enumerate(rd):
        assert by_id[rid]["content"] == f"D-{i}" and by_id[rid]["role"] == "user"
    # The big batch was taken by the writer, so it committed whole despite its caller's cancellation.
    assert contents[:big_rows] == [f"big-{i}" for i in range(big_rows)]
    assert not any(c.startswith(("A-", "B-")) for c in contents), "a withdrawn command was written"
    assert sorted(c for c in contents if c.startswith("C-")) == sorted(f"C-{i}" for i in range(60))
    assert len(rows) == big_rows + 60 + 60
    assert len(set(contents)) == len(contents)
    await _assert_counter_matches_rows(store, sid)

    # The writer is still alive.
    assert store._actor.running
    new_id = await store.append_message(sid, "user", "after")
    assert new_id > max(by_id)
    assert (await _rows(store, sid))[-1]["content"] == "after"


async def test_cancel_callers_at_random_points(store: SessionDB) -> None:
    sid = "cancel-chaos"
    await store.create_session(sid, "cli")
    rng = random.Random(1234)
    batch_size = 50

    async def single(i: int) -> int:
        return await store.append_message(sid, "user", f"s{i}:" + "x" * (i % 97))

    async def batch(i: int) -> int:
        msgs = [{"role": "tool", "content": f"b{i}/{j}:" + "y" * j} for j in range(batch_size)]
        return await store.append_messages_batch(sid, msgs)

    tasks: list[tuple[str, int, asyncio.Task[int]]] = []
    for i in range(300):
        tasks.append(("s", i, asyncio.ensure_future(single(i))))
        if i % 10 == 0:
            tasks.append(("b", i, asyncio.ensure_future(batch(i))))

    async def canceller(task: asyncio.Task[int]) -> None:
        for _ in range(rng.randrange(0, 8)):
            await asyncio.sleep(0)
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() * 0.01)
        task.cancel()

    victims = [t for j, (_, _, t) in enumerate(tasks) if j % 2 == 0]
    await asyncio.gather(*(canceller(t) for t in victims))
    results = await asyncio.gather(*(t for _, _, t in tasks), return_exceptions=True)

    rows = await _rows(store, sid)
    by_content = {r["content"]: r for r in rows}
    assert len(by_content) == len(rows), "duplicate rows"
    ok = 0
    for (kind, i, _), res in zip(tasks, results):
        assert isinstance(res, (int, asyncio.CancelledError)), res
        if kind == "s":
            content = f"s{i}:" + "x" * (i % 97)
            if isinstance(res, int):
                ok += 1
                assert res in {r["id"] for r in rows}
                assert by_content[content]["id"] == res
        else:
            present = [f"b{i}/{j}:" + "y" * j in by_content for j in range(batch_size)]
            assert all(present) or not any(present), f"batch {i} written partially"
            if isinstance(res, int):
                ok += 1
                assert res == batch_size and all(present)
            if all(present):
                ids = [by_content[f"b{i}/{j}:" + "y" * j]["id"] for j in range(batch_size)]
                assert ids == list(range(ids[0], ids[0] + batch_size)), "batch rows not contiguous"
    assert ok > 0
    # every row is one of the messages we wrote, intact
    valid = {f"s{i}:" + "x" * (i % 97) for i in range(300)} | {
        f"b{i}/{j}:" + "y" * j for i in range(0, 300, 10) for j in range(batch_size)
    }
    assert set(by_content) <= valid
    await _assert_counter_matches_rows(store, sid)
    assert store._actor.running
    assert await store.append_message(sid, "user", "still alive") > 0


# ------------------------------------------------- 3. poisoned commands


async def test_poisoned_commands_share_a_batch_without_harming_neighbours(store: SessionDB) -> None:
    await store.create_session("good", "cli")
    await store.create_session("busy", "cli")
    await store.create_session("compressed", "cli")
    await store.append_message("compressed", "user", "before compression")
    await store.end_session("compressed", "compression")
    total_before = await store.message_count()

    # Keep the writer busy so everything below queues up behind it and lands in one batch.
    big = await _start_busy_writer(store, "busy", 5000, "busy")
    batches0, commands0 = store._actor.batches, store._actor.commands

    calls: list[tuple[str, Any]] = []
    for i in range(40):
        calls.append(("ok", store.append_message("good", "user", f"good-{i}")))
        if i % 8 == 0:
            calls.append(("missing", store.append_message(f"ghost-{i}", "user", f"ghost-{i}")))
            calls.append(("compressed", store.append_message("compressed", "user", f"late-{i}")))
        if i % 10 == 0:
            calls.append(("orphan", store.create_session(f"orphan-{i}", "cli", parent_session_id=f"no-parent-{i}")))
            calls.append(("child", store.create_session(f"child-{i}", "cli", parent_session_id="good")))
    calls.append(("missing-batch", store.append_messages_batch("ghost-batch", [{"role": "user", "content": "gb"}] * 5)))
    results = await asyncio.gather(*(c for _, c in calls), return_exceptions=True)
    assert await big == 5000

    applied_batches = store._actor.batches - batches0
    applied_commands = store._actor.commands - commands0
    assert applied_commands == len(calls) + 1  # + the big batch
    assert applied_batches < len(calls), "the commands did not share a batch"

    good_ids = []
    for (kind, _), res in zip(calls, results):
        if kind == "ok":
            assert isinstance(res, int), res
            good_ids.append(res)
        elif kind in ("missing", "missing-batch"):
            assert type(res) is SessionNotFoundError, res
            assert isinstance(res, sqlite3.IntegrityError)
        elif kind == "compressed":
            assert type(res) is CompressionSessionClosedError, res
        elif kind == "orphan":
            assert type(res) is SessionNotFoundError, res
            assert "parent" in str(res)
        elif kind == "child":
            assert isinstance(res, str), res
    # each failing caller got its own exception object
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len({id(e) for e in errors}) == len(errors)

    rows = await _rows(store, "good")
    assert [r["content"] for r in rows] == [f"good-{i}" for i in range(40)]
    assert [r["id"] for r in rows] == good_ids
    await _assert_counter_matches_rows(store, "good")
    compressed = await _rows(store, "compressed")
    assert [r["content"] for r in compressed] == ["before compression"]
    await _assert_counter_matches_rows(store, "compressed")
    for i in range(0, 40, 8):
        assert await store.get_session(f"ghost-{i}") is None
        assert await store.message_count(f"ghost-{i}") == 0
    assert await store.get_session("ghost-batch") is None
    for i in range(0, 40, 10):
        assert await store.get_session(f"orphan-{i}") is None
        child = await store.get_session(f"child-{i}")
        assert child is not None and child["parent_session_id"] == "good"
    assert await store.message_count() == total_before + 40 + 5000
    assert store._actor.running


# --------------------------------------------- 4. close with queued writes


async def test_close_drains_queued_writes_and_rejects_later_ones(target: str) -> None:
    db = open_store(target)
    await db.create_session("s", "cli")
    await db.create_session("busy", "cli")
    # The writer is busy with a big batch, so wave 1 waits in the queue when close() is called.
    big = await _start_busy_writer(db, "busy", 5000, "busy")
    wave1 = [asyncio.ensure_future(db.append_message("s", "user", f"w1-{i}")) for i in range(200)]
    await asyncio.sleep(0)  # wave 1 is now queued
    assert db._actor._queue.qsize() == 200 and not big.done()
    wave2 = [asyncio.ensure_future(db.append_message("s", "user", f"w2-{i}")) for i in range(200)]
    await db.close()  # wave 2 has not started yet
    assert await big == 5000
    results1 = await asyncio.gather(*wave1, return_exceptions=True)
    results2 = await asyncio.gather(*wave2, return_exceptions=True)

    ok: dict[int, str] = {}
    for wave, results in (("w1", results1), ("w2", results2)):
        for i, res in enumerate(results):
            if isinstance(res, int):
                ok[res] = f"{wave}-{i}"
            else:
                assert isinstance(res, StoreClosedError), repr(res)
                assert str(res) == "SessionDB is closed"
    # close() applies everything queued before it; nothing may start after it
    assert all(isinstance(r, int) for r in results1), "a queued write was dropped by close()"
    assert all(isinstance(r, StoreClosedError) for r in results2)
    assert len(ok) == 200

    reopened = open_store(target)
    try:
        rows = await _rows(reopened, "s")
        assert len(rows) == len(ok)
        assert {r["id"]: r["content"] for r in rows} == ok
        await _assert_counter_matches_rows(reopened, "s")
        assert await _assert_counter_matches_rows(reopened, "busy") == 5000
    finally:
        await reopened.close()


async def test_close_while_queue_is_deep_mixed_outcomes(target: str) -> None:
    db = open_store(target)
    await db.create_session("s", "cli")
    tasks = []
    for i in range(200):
        tasks.append(asyncio.ensure_future(db.append_message("s", "user", f"m-{i}")))
        if i % 25 == 0:
            await asyncio.sleep(0)  # let part of them queue, the writer start batches
    close_task = asyncio.ensure_future(db.close())
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await close_task
    ok = {}
    for i, res in enumerate(results):
        if isinstance(res, int):
            ok[res] = f"m-{i}"
        else:
            assert isinstance(res, StoreClosedError) and str(res) == "SessionDB is closed", repr(res)
    assert ok, "no write was queued before close"
    reopened = open_store(target)
    try:
        rows = await _rows(reopened, "s")
        assert {r["id"]: r["content"] for r in rows} == ok
        assert await reopened.message_count() == len(ok)
        await _assert_counter_matches_rows(reopened, "s")
    finally:
        await reopened.close()


async def test_close_is_idempotent_and_concurrent_and_later_calls_fail(target: str) -> None:
    db = open_store(target)
    await db.create_session("s", "cli")
    await db.append_message("s", "user", "hello")
    assert await asyncio.gather(db.close(), db.close()) == [None, None]
    assert db.closed
    assert await db.close() is None

    calls = [
        lambda: db.append_message("s", "user", "late"),
        lambda: db.append_messages_batch("s", [{"role": "user", "content": "late"}]),
        lambda: db.create_session("t", "cli"),
        lambda: db.end_session("s", "done"),
        lambda: db.get_messages("s"),
        lambda: db.get_session("s"),
        lambda: db.message_count(),
        lambda: db.storage_info(),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError) as info:
            await call()
        assert isinstance(info.value, RuntimeError)
        assert str(info.value) == "SessionDB is closed"
    with pytest.raises(RuntimeError, match="^SessionDB is closed$"):
        await db.append_message("s", "user", "late")

    # a store closed before it was ever opened behaves the same and writes nothing
    never = open_store(target)
    await never.close()
    await never.close()
    with pytest.raises(StoreClosedError, match="^SessionDB is closed$"):
        await never.append_message("s", "user", "late")

    reopened = open_store(target)
    try:
        assert [r["content"] for r in await _rows(reopened, "s")] == ["hello"]
        assert await reopened.get_session("t") is None
        assert (await reopened.get_session("s"))["end_reason"] is None
    finally:
        await reopened.close()


# ------------------------------------------------------------ 5. reopen


async def test_reopen_by_second_store_reads_everything_back(target: str) -> None:
    a = open_store(target)
    expected: dict[str, list[tuple[str, Any]]] = {}
    ids: dict[str, list[int]] = {}
    await a.create_session("root", "cli", model="m1", system_prompt="be brief")
    for s in range(5):
        sid = f"sess-{s}"
        await a.create_session(sid, "telegram", parent_session_id="root")
        expected[sid] = []
        ids[sid] = []
        for k in range(20):
            content: Any = f"text {s}/{k} \u00e9\u6f22\U0001f600" if k % 3 else {"parts": [s, k], "note": "structured"}
            role = ["user", "assistant", "tool"][k % 3]
            ids[sid].append(await a.append_message(sid, role, content))
            expected[sid].append((role, content))
        n = await a.append_messages_batch(sid, [{"role": "user", "content": f"batch {s}/{j}"} for j in range(30)])
        assert n == 30
        expected[sid].extend(("user", f"batch {s}/{j}") for j in range(30))
    await a.close()

    b = open_store(target)
    try:
        root = await b.get_session("root")
        assert root is not None and root["model"] == "m1" and root["system_prompt"] == "be brief"
        total = 0
        for sid, want in expected.items():
            rows = await _rows(b, sid)
            assert [(r["role"], r["content"]) for r in rows] == want
            assert [r["id"] for r in rows[:20]] == ids[sid]
            session = await b.get_session(sid)
            assert session["parent_session_id"] == "root" and session["source"] == "telegram"
            assert await _assert_counter_matches_rows(b, sid) == 50
            total += len(rows)
        assert await b.message_count() == total == 250
        # the reopened store can keep writing after the old ids
        new_id = await b.append_message("sess-0", "user", "after reopen")
        assert new_id > max(i for v in ids.values() for i in v)
    finally:
        await b.close()


async def _two_stores_append_concurrently(target: str) -> None:
    a = open_store(target)
    b = open_store(target)
    try:
        await a.create_session("from-a", "cli")
        await b.create_session("from-b", "cli")

        async def appends(db: SessionDB, sid: str, n: int) -> list[int]:
            return list(await asyncio.gather(*(db.append_message(sid, "user", f"{sid}:{i}") for i in range(n))))

        ids_a, ids_b = await asyncio.gather(appends(a, "from-a", 100), appends(b, "from-b", 100))
        # a second wave of sequential appends interleaved across both stores
        for i in range(25):
            ids_a.append(await a.append_message("from-a", "assistant", f"from-a:seq{i}"))
            ids_b.append(await b.append_message("from-b", "assistant", f"from-b:seq{i}"))
        assert len(set(ids_a) | set(ids_b)) == 250, "two stores handed out the same row id"

        for db in (a, b):  # each store sees the other's writes
            for sid, ids in (("from-a", ids_a), ("from-b", ids_b)):
                rows = await _rows(db, sid)
                assert len(rows) == 125
                assert {r["id"] for r in rows} == set(ids)
                assert all(r["content"].startswith(f"{sid}:") for r in rows)
                assert [r["content"] for r in rows[-25:]] == [f"{sid}:seq{i}" for i in range(25)]
                await _assert_counter_matches_rows(db, sid)
            assert await db.message_count() == 250
    finally:
        await a.close()
        await b.close()


async def test_two_stores_on_one_file_append_concurrently(db_path: Path) -> None:
    await _two_stores_append_concurrently(str(db_path))
    assert _integrity_check(db_path) == "ok"


async def test_two_postgres_stores_append_concurrently(pg_dsn: str) -> None:
    await _two_stores_append_concurrently(pg_dsn)


# ------------------------------------------------------- 6. SIGKILL


CHILD_SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    PAD = "p" * 300


    async def main(path, mode):
        if path.startswith("postgresql"):
            from hermes_state.postgres import SessionDB
        else:
            from hermes_state import SessionDB
        db = SessionDB(path)
        await db.create_session("victim", "cli")
        out = sys.stdout

        async def single(w):
            k = 0
            while True:
                content = f"w{w}-k{k}-" + PAD
                mid = await db.append_message("victim", "user", content)
                out.write(f"{mid} {content}\\n")
                out.flush()
                k += 1

        async def batch(w):
            k = 0
            while True:
                tag = f"w{w}-b{k}"
                n = await db.append_messages_batch(
                    "victim", [{"role": "assistant", "content": f"{tag}-r{j}-" + PAD} for j in range(200)]
                )
                out.write(f"{tag} {n}\\n")
                out.flush()
                k += 1

        worker = single if mode == "single" else batch
        await asyncio.gather(*(worker(w) for w in range(6)))


    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


async def _run_and_kill(
    tmp_path: Path, db_path: Path | str, mode: str, want_acks: int, kill_delay: float
) -> list[str]:
    script = tmp_path / "child_writer.py"
    script.write_text(CHILD_SCRIPT)
    child_home = tmp_path / "child-home"
    child_home.mkdir(exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["HERMES_HOME"] = str(child_home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(db_path), mode,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())  # drained concurrently, shown on failure
    acks: list[str] = []
    enough = asyncio.Event()

    async def read_acks() -> None:
        # Keep draining stdout so the child never blocks on a full pipe.
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            acks.append(line.decode())
            if len(acks) >= want_acks:
                enough.set()

    reader = asyncio.ensure_future(read_acks())
    waiter = asyncio.ensure_future(enough.wait())
    try:
        await asyncio.wait({reader, waiter}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if not enough.is_set():
            if proc.returncode is None:
                proc.kill()
            rc = await proc.wait()
            err = (await asyncio.wait_for(errors, timeout=30)).decode()
            pytest.fail(f"child did not acknowledge {want_acks} writes (rc={rc}): {err[-2000:]}")
        # Kill at a moment unrelated to the last acknowledgement, so the child
        # is usually in the middle of a transaction rather than printing.
        await asyncio.sleep(kill_delay)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(reader, timeout=30)  # lines written before the kill were acknowledged too
        rc = await asyncio.wait_for(proc.wait(), timeout=30)
        err = (await asyncio.wait_for(errors, timeout=30)).decode()
        assert rc == -signal.SIGKILL, err[-2000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        reader.cancel()
        waiter.cancel()
        errors.cancel()
    return [line.rstrip("\n") for line in acks if line.endswith("\n")]


KILL_DELAYS = pytest.mark.parametrize(
    "kill_delay",
    [pytest.param(0.0, id="at-ack"), pytest.param(0.013, id="13ms", marks=pytest.mark.slow),
     pytest.param(0.04, id="40ms", marks=pytest.mark.slow)],
)


@KILL_DELAYS
async def test_sigkill_during_single_appends_loses_no_acknowledged_write(
    tmp_path: Path, db_path: Path, kill_delay: float
) -> None:
    await _sigkill_single_appends(tmp_path, str(db_path), kill_delay)
    assert _integrity_check(db_path) == "ok"


async def test_sigkill_during_single_appends_loses_no_acknowledged_write_postgres(tmp_path: Path, pg_dsn: str) -> None:
    await _sigkill_single_appends(tmp_path, pg_dsn, 0.013)


async def _sigkill_single_appends(tmp_path: Path, target: str, kill_delay: float) -> None:
    acks = await _run_and_kill(tmp_path, target, "single", 300, kill_delay)
    assert len(acks) >= 300
    acked = {}
    for line in acks:
        mid, content = line.split(" ", 1)
        acked[int(mid)] = content
    assert len(acked) == len(acks), "child saw duplicate ids"

    db = open_store(target)
    try:
        rows = await _rows(db, "victim")
        by_id = {r["id"]: r for r in rows}
        missing = sorted(set(acked) - set(by_id))
        assert not missing, f"acknowledged ids lost after SIGKILL: {missing[:10]}"
        for mid, content in acked.items():
            assert by_id[mid]["content"] == content and by_id[mid]["role"] == "user"
        # every row on disk is a complete message the child wrote
        assert all(r["content"].endswith("-" + "p" * 300) for r in rows)
        assert len({r["content"] for r in rows}) == len(rows)
        await _assert_counter_matches_rows(db, "victim")
        # the store is writable after recovery
        assert await db.append_message("victim", "user", "after crash") > max(by_id)
    finally:
        await db.close()


@KILL_DELAYS
async def test_sigkill_during_batch_appends_leaves_no_partial_batch(
    tmp_path: Path, db_path: Path, kill_delay: float
) -> None:
    await _sigkill_batch_appends(tmp_path, str(db_path), kill_delay)
    assert _integrity_check(db_path) == "ok"


async def test_sigkill_during_batch_appends_leaves_no_partial_batch_postgres(tmp_path: Path, pg_dsn: str) -> None:
    await _sigkill_batch_appends(tmp_path, pg_dsn, 0.013)


async def _sigkill_batch_appends(tmp_path: Path, target: str, kill_delay: float) -> None:
    acks = await _run_and_kill(tmp_path, target, "batch", 20, kill_delay)
    assert len(acks) >= 20
    acked_tags = []
    for line in acks:
        tag, n = line.split(" ")
        assert n == "200"
        acked_tags.append(tag)

    db = open_store(target)
    try:
        rows = await _rows(db, "victim")
        assert len(rows) % 200 == 0, f"partial batch on disk: {len(rows)} rows"
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            tag, rest = r["content"].split("-r", 1)
            groups.setdefault(tag, []).append(r)
            assert rest.endswith("-" + "p" * 300)
        for tag, members in groups.items():
            assert [m["content"] for m in members] == [f"{tag}-r{j}-" + "p" * 300 for j in range(200)], tag
            ids = [m["id"] for m in members]
            assert ids == list(range(ids[0], ids[0] + 200)), f"batch {tag} not contiguous"
        lost = [t for t in acked_tags if t not in groups]
        assert not lost, f"acknowledged batches lost after SIGKILL: {lost}"
        await _assert_counter_matches_rows(db, "victim")
    finally:
        await db.close()


# ------------------------------------------------------ 7. bad input


async def test_bad_input_is_rejected_before_anything_is_queued(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    first = await store.append_message("s", "user", "only")
    batches0, commands0 = store._actor.batches, store._actor.commands
    total0 = await store.message_count()

    class Unserialisable:
        pass

    bad_calls = [
        (TypeError, lambda: store.append_message("s", 123, "x")),
        (TypeError, lambda: store.append_message("s", None, "x")),
        (TypeError, lambda: store.append_message(123, "user", "x")),
        (TypeError, lambda: store.append_message(None, "user", "x")),
        (ValueError, lambda: store.append_message("", "user", "x")),
        (ValueError, lambda: store.append_message("   ", "user", "x")),
        (ValueError, lambda: store.append_message("s\x00t", "user", "x")),
        (TypeError, lambda: store.append_message("s", "user", object())),
        (TypeError, lambda: store.append_message("s", "user", {"nested": Unserialisable()})),
        (TypeError, lambda: store.append_message("s", "user", [1, {2, 3}])),
        (TypeError, lambda: store.append_messages_batch(
            "s", [{"role": "user", "content": "fine"}, {"role": "user", "content": object()}])),
        (TypeError, lambda: store.append_messages_batch("s", [{"role": "user", "content": "fine"}, "not a dict"])),
        (ValueError, lambda: store.append_messages_batch("", [{"role": "user", "content": "fine"}])),
        (TypeError, lambda: store.create_session(None, "cli")),
        (TypeError, lambda: store.create_session("new", 5)),
        (TypeError, lambda: store.create_session("new", "cli", model_config={"k": object()})),
        (ValueError, lambda: store.create_session("new", "cli", parent_session_id="")),
        (TypeError, lambda: store.end_session("s", None)),
    ]
    for exc_type, call in bad_calls:
        with pytest.raises(exc_type):
            await call()
        assert store._actor._queue.qsize() == 0
    assert store._actor.commands == commands0, "a bad command reached the writer"
    assert store._actor.batches == batches0
    assert await store.message_count() == total0
    assert [r["content"] for r in await _rows(store, "s")] == ["only"]
    assert await store.get_session("new") is None
    assert (await store.get_session("s"))["end_reason"] is None
    await _assert_counter_matches_rows(store, "s")

    # A read-only store on the same database refuses every write before queueing it.
    ro = open_store(store_target(store), read_only=True)
    # Each backend's documented refusal (an intended difference, listed in docs/postgres.md).
    refusal, match = READ_ONLY_REFUSALS["postgres" if is_postgres(store) else "sqlite"]
    try:
        for call in (
            lambda: ro.append_message("s", "user", "nope"),
            lambda: ro.append_messages_batch("s", [{"role": "user", "content": "nope"}]),
            lambda: ro.create_session("ro-new", "cli"),
            lambda: ro.end_session("s", "done"),
        ):
            with pytest.raises(refusal, match=match):
                await call()
        assert ro._actor.commands == 0 and ro._actor.batches == 0 and not ro._actor.running
        # reads still work on the read-only store and see unchanged data
        assert [r["id"] for r in await _rows(ro, "s")] == [first]
        assert await ro.get_session("ro-new") is None
    finally:
        await ro.close()
    assert store._actor.commands == commands0
    assert await store.message_count() == total0
    assert await store.append_message("s", "user", "still writable") > first
