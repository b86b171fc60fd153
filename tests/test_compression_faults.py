"""Compression under real contention: several stores and processes, killed holders, races, cancellation."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    SessionDB,
)
from hermes_state.sqlite.driver import driver_module

from .conftest import BACKENDS
from .postgres_support import schema_connect
from .raw_sql import fetch_rows, open_store, raw_exec, store_target

REPO = Path(__file__).resolve().parent.parent

# Child processes open a store on a SQLite path or a PostgreSQL DSN (its schema in the query string).
OPEN_STORE = textwrap.dedent(
    """
    def open_store(target):
        if target.startswith("postgresql"):
            from hermes_state.postgres import SessionDB as Store
        else:
            from hermes_state import SessionDB as Store
        return Store(target)
    """
)

# A child process: open the store, report, wait for the go file, then try for the lease.
RACER = textwrap.dedent(
    """
    import asyncio, os, sys, time

    async def main():
        target, holder, go = sys.argv[1], sys.argv[2], sys.argv[3]
        db = open_store(target)
        await db.get_meta("warm-up")
        print("ready", flush=True)
        while not os.path.exists(go):
            time.sleep(0.001)
        won = await db.try_acquire_compression_lock("shared", holder, 60)
        print("won" if won else "lost", flush=True)
        await db.close()

    asyncio.run(main())
    """
)

# A child process that takes a lease in its own name and then just sits there.
HOLDER = textwrap.dedent(
    """
    import asyncio, os, sys

    async def main():
        db = open_store(sys.argv[1])
        holder = f"pid={os.getpid()}:task=compress:agent=abcdef:nonce=0badf00d"
        assert await db.try_acquire_compression_lock("s", holder, 600)
        print(holder, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def spawn(script: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", OPEN_STORE + script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def read_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.wait(timeout=10)
        assert proc.stderr is not None
        pytest.fail(f"child exited early: {proc.stderr.read()}")
    return line


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """A database several stores (and processes) open: a SQLite path or a PostgreSQL DSN with its own schema."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    return str(db_path)


async def seed(db: SessionDB, session_id: str, turns: int) -> list[int]:
    await db.create_session(session_id, "cli")
    return [await db.append_message(session_id, "user", f"old {i}") for i in range(turns)]


# ---------------------------------------------------------------- lease races


async def test_two_stores_on_one_database_have_one_winner(target: str) -> None:
    first, second = open_store(target), open_store(target)
    try:
        await first.get_meta("open")
        await second.get_meta("open")
        for round_ in range(5):
            attempts = [(db, f"holder-{round_}-{i}-{n}") for i in range(10) for n, db in enumerate((first, second))]
            results = await asyncio.gather(
                *(db.try_acquire_compression_lock(f"s{round_}", holder, 60) for db, holder in attempts)
            )
            winners = [holder for (_, holder), won in zip(attempts, results) if won]
            assert len(winners) == 1
            assert await first.get_compression_lock_holder(f"s{round_}") == winners[0]
            assert await second.get_compression_lock_holder(f"s{round_}") == winners[0]
    finally:
        await first.close()
        await second.close()


async def test_processes_race_for_one_lease(target: str, tmp_path: Path) -> None:
    async with open_store(target) as db:
        await db.get_meta("create")
    go = tmp_path / "go"
    racers = [spawn(RACER, target, f"pid=0:racer={i}", str(go)) for i in range(4)]
    try:
        for proc in racers:
            assert await asyncio.to_thread(read_line, proc) == "ready"
        go.touch()
        outcomes = [await asyncio.to_thread(read_line, proc) for proc in racers]
        for proc in racers:
            assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        for proc in racers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    async with open_store(target) as db:
        ((holder,),) = await fetch_rows(db, "SELECT holder FROM compression_locks WHERE session_id = 'shared'")
    assert holder == f"pid=0:racer={outcomes.index('won')}"


# ----------------------------------------------------------- killed holders


async def test_lease_of_a_sigkilled_holder_is_taken_over(store: SessionDB) -> None:
    await seed(store, "s", 2)
    proc = spawn(HOLDER, store_target(store))
    try:
        holder = await asyncio.to_thread(read_line, proc)
        assert holder.startswith(f"pid={proc.pid}:")
        assert await store.get_compression_lock_holder("s") == holder
        assert not await store.try_acquire_compression_lock("s", "successor")  # holder alive
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    # The dead holder's lease still reads as live by time...
    assert await store.get_compression_lock_holder("s") == holder
    # ...but the next acquirer sees the process is gone and takes it over.
    assert await store.try_acquire_compression_lock("s", "successor", ttl_seconds=60)
    assert await store.get_compression_lock_holder("s") == "successor"
    await store.publish_compression_child(
        parent_session_id="s", child_session_id="s2", source="cli",
        messages=[{"role": "user", "content": "summary"}], compression_lock_holder="successor",
    )
    assert await store.get_compression_tip("s") == "s2"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see zombie processes")
async def test_lease_of_an_unreaped_killed_holder_is_taken_over(store: SessionDB) -> None:
    proc = spawn(HOLDER, store_target(store))
    try:
        holder = await asyncio.to_thread(read_line, proc)
        os.kill(proc.pid, signal.SIGKILL)  # not reaped: the pid stays as a zombie
        stat = Path(f"/proc/{proc.pid}/stat")
        for _ in range(200):
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            await asyncio.sleep(0.01)
        assert await store.get_compression_lock_holder("s") == holder
        assert await store.try_acquire_compression_lock("s", "successor")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.backends("postgres")
async def test_postgres_lease_from_another_host_ends_by_expiry_only(store: SessionDB) -> None:
    from hermes_state.lease_host import LOCAL_HOST

    assert LOCAL_HOST is not None  # Linux: this host's leases carry its token (the tests above rely on it)
    await seed(store, "s", 1)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = f"pid={int(done.stdout)}:task=compress:agent=abcdef:nonce=0badf00d"  # no such process here
    assert await store.try_acquire_compression_lock("s", holder, ttl_seconds=3.0)
    ((host,),) = await fetch_rows(store, "SELECT holder_host FROM compression_locks WHERE session_id = 's'")
    assert host == LOCAL_HOST
    # Written by a worker on another machine (or before leases carried a host): its pid names nothing here.
    for other in ("another-boot-id:4:4026531836", None):
        await raw_exec(store, "UPDATE compression_locks SET holder_host = ? WHERE session_id = 's'", (other,))
        assert not await store.try_acquire_compression_lock("s", "successor", ttl_seconds=60)
        assert await store.get_compression_lock_holder("s") == holder
    deadline = time.monotonic() + 10
    while not await store.try_acquire_compression_lock("s", "successor", ttl_seconds=60):
        assert time.monotonic() < deadline, "the lease outlived its TTL"
        await asyncio.sleep(0.05)


async def test_postgres_lease_table_without_holder_host_gains_it_on_open(pg_dsn: str) -> None:
    """A schema written before leases carried a host: its old rows end by expiry, new ones carry the token."""
    from hermes_state.postgres import SessionDB as PostgresSessionDB
    from hermes_state.lease_host import LOCAL_HOST

    async with PostgresSessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
    conn = await schema_connect(pg_dsn)
    try:
        await conn.execute("ALTER TABLE compression_locks DROP COLUMN holder_host")
        await conn.execute(
            "INSERT INTO compression_locks VALUES ('s', 'pid=999999999:task=old', $1, $2)", time.time(), time.time() + 60
        )
    finally:
        await conn.close()
    async with PostgresSessionDB(pg_dsn) as db:
        assert not await db.try_acquire_compression_lock("s", "successor")  # an old row: expiry only
        assert await db.try_acquire_compression_lock("t", "new-holder")
        rows = await fetch_rows(db, "SELECT session_id, holder_host FROM compression_locks ORDER BY session_id")
    assert rows == [("s", None), ("t", LOCAL_HOST)]


def test_lease_host_token_names_boot_and_pid_namespace() -> None:
    from hermes_state.lease_host import LOCAL_HOST, is_local, local_host_token

    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    namespace = os.stat("/proc/self/ns/pid")
    assert LOCAL_HOST == local_host_token() == f"{boot}:{namespace.st_dev}:{namespace.st_ino}"
    assert is_local(LOCAL_HOST) and not is_local(None) and not is_local(f"{boot}:{namespace.st_dev}:1")


# ------------------------------------------------------- appends vs compaction


def _check_writers(rows: list[dict[str, Any]], writers: int, per_writer: int) -> dict[str, dict[str, Any]]:
    by_content = {}
    for row in rows:
        assert row["content"] not in by_content, f"duplicated row {row['content']!r}"
        by_content[row["content"]] = row
    for w in range(writers):
        ids = [by_content[f"w{w}-{i}"]["id"] for i in range(per_writer)]  # KeyError = a lost row
        assert ids == sorted(ids), f"writer {w} rows out of order"
    return by_content


async def test_appends_racing_a_leased_compaction(target: str) -> None:
    """The agent's protocol: lease, read the watermark, summarise (slow), compact with it, release.

    Other writers (another store) keep appending the whole time and are never
    held back; every row they wrote is live after the summary, in their order.
    """
    compactor, other = open_store(target), open_store(target)
    try:
        await seed(compactor, "s", 20)
        assert await compactor.try_acquire_compression_lock("s", "owner", ttl_seconds=60)
        watermark = await compactor.get_active_message_watermark("s")

        started = asyncio.Event()

        async def writer(w: int) -> None:
            for i in range(8):
                await other.append_message("s", "user", f"w{w}-{i}")
                if i == 1:
                    started.set()
                await asyncio.sleep(0.02)

        writers = [asyncio.create_task(writer(w)) for w in range(3)]
        await asyncio.wait_for(started.wait(), 30)  # the slow summary call; the writers keep appending
        summary = [{"role": "user", "content": "summary"}, {"role": "assistant", "content": "ack"}]
        inserted = await compactor.archive_and_compact("s", summary, watermark=watermark, lock_holder="owner")
        await compactor.release_compression_lock("s", "owner")
        await asyncio.gather(*writers)

        live = await compactor.get_messages("s")
        assert [r["content"] for r in live[:2]] == ["summary", "ack"]
        by_content = _check_writers(live, 3, 8)  # every writer row live exactly once, in its writer's order
        assert len(live) == 2 + 24
        assert 2 < inserted <= 2 + 24  # the summary plus the tail cloned at compaction time
        everything = await compactor.get_messages("s", include_inactive=True)
        assert all((r["active"], r["compacted"]) == (0, 1) for r in everything if r["content"].startswith("old "))
        cloned = [r for r in everything if r["content"].startswith("w") and r["active"] == 0]
        assert len(cloned) == inserted - 2  # the tail's originals stay, archived
        assert all(r["id"] < by_content[r["content"]]["id"] for r in cloned)
        session = await compactor.get_session("s")
        assert session is not None and session["message_count"] == len(live)
    finally:
        await compactor.close()
        await other.close()


async def test_appends_racing_an_unleased_compaction_lose_nothing(target: str) -> None:
    """Without a lease each append lands wholly before (archived) or after (active) the compaction."""
    first, second = open_store(target), open_store(target)
    try:
        await seed(first, "s", 5)
        await second.get_meta("open")

        async def writer(db: SessionDB, w: int) -> None:
            for i in range(15):
                await db.append_message("s", "user", f"w{w}-{i}")
                await asyncio.sleep(random.uniform(0, 0.002))

        async def compactor() -> None:
            for round_ in range(5):
                await asyncio.sleep(random.uniform(0.002, 0.01))
                await first.archive_and_compact("s", [{"role": "user", "content": f"summary {round_}"}])

        await asyncio.gather(compactor(), *(writer(db, w) for w, db in enumerate((first, second, first, second))))
        rows = await first.get_messages("s", include_inactive=True)
        by_content = _check_writers(rows, 4, 15)
        last_summary = by_content["summary 4"]["id"]
        for row in rows:
            if row["id"] < last_summary:
                assert (row["active"], row["compacted"]) == (0, 1)
            else:
                assert (row["active"], row["compacted"]) == (1, 0)
        active = await first.get_messages("s")
        session = await first.get_session("s")
        assert session is not None and session["message_count"] == len(active)
        assert len(rows) == 5 + 5 + 60
    finally:
        await first.close()
        await second.close()


# ---------------------------------------------------------------- cancellation


async def _state(db: SessionDB, old: list[int], summary: list[str]) -> str:
    """'untouched' or 'compacted'; anything in between fails the test."""
    rows = await db.get_messages("s", include_inactive=True)
    session = await db.get_session("s")
    assert session is not None
    old_rows = [r for r in rows if r["id"] in old]
    new_rows = [r for r in rows if r["id"] not in old]
    assert len(old_rows) == len(old)
    if not new_rows and all(r["active"] == 1 and r["compacted"] == 0 for r in old_rows):
        assert session["message_count"] == len(old)
        return "untouched"
    assert all(r["active"] == 0 and r["compacted"] == 1 for r in old_rows)
    assert [r["content"] for r in new_rows] == summary and all(r["active"] == 1 for r in new_rows)
    assert session["message_count"] == len(summary)
    return "compacted"


def _hold_write_lock(db_path: Path) -> Any:
    # The store's own SQLite library: POSIX locks of two libraries in one process do not see each other.
    conn = driver_module().connect(str(db_path), timeout=10, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


@pytest.mark.backends("sqlite")  # holds SQLite's file lock; PostgreSQL twin below holds the session's row lock
async def test_cancel_while_the_writer_runs_the_compaction(store: SessionDB, db_path: Path) -> None:
    old = await seed(store, "s", 6)
    summary = [f"summary {i}" for i in range(300)]
    blocker = _hold_write_lock(db_path)
    task = asyncio.create_task(store.archive_and_compact("s", [{"role": "user", "content": c} for c in summary]))
    await asyncio.sleep(0.3)  # the writer took the command and waits on the file lock
    task.cancel()
    blocker.rollback()  # released within the writer's 1 s busy timeout
    blocker.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.set_meta("barrier", "1")  # queued behind the compaction's batch
    assert await _state(store, old, summary) == "compacted"


@pytest.mark.backends("sqlite")  # holds SQLite's file lock; PostgreSQL twin below holds a session's row lock
async def test_cancel_while_the_compaction_is_queued(store: SessionDB, db_path: Path) -> None:
    old = await seed(store, "s", 6)
    blocker = _hold_write_lock(db_path)
    ahead = asyncio.create_task(store.set_meta("ahead", "1"))
    await asyncio.sleep(0.2)  # the writer is stuck on `ahead`; the compaction waits in the queue
    task = asyncio.create_task(store.archive_and_compact("s", [{"role": "user", "content": "summary"}]))
    await asyncio.sleep(0.05)
    task.cancel()
    blocker.rollback()
    blocker.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    await ahead
    await store.set_meta("barrier", "1")
    assert await _state(store, old, ["summary"]) == "untouched"
    assert await store.get_meta("ahead") == "1"


async def _hold_session_row(pg_dsn: str, session_id: str) -> Any:
    """A raw PostgreSQL connection holding ``session_id``'s row lock in an open transaction."""
    conn = await schema_connect(pg_dsn)
    await conn.execute("BEGIN")
    await conn.execute("SELECT id FROM sessions WHERE id = $1 FOR UPDATE", session_id)
    return conn


async def _release(conn: Any) -> None:
    await conn.execute("ROLLBACK")
    await conn.close()


async def test_cancel_while_the_writer_waits_on_the_row_lock_postgres(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    try:
        old = await seed(store, "s", 6)
        summary = [f"summary {i}" for i in range(300)]
        blocker = await _hold_session_row(pg_dsn, "s")
        task = asyncio.create_task(store.archive_and_compact("s", [{"role": "user", "content": c} for c in summary]))
        await asyncio.sleep(0.3)  # the writer took the command and waits on the row lock
        task.cancel()
        await _release(blocker)
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.set_meta("barrier", "1")  # queued behind the compaction's batch
        assert await _state(store, old, summary) == "compacted"
    finally:
        await store.close()


async def test_cancel_while_the_compaction_is_queued_postgres(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    try:
        old = await seed(store, "s", 6)
        await store.create_session("blocked", "cli")
        blocker = await _hold_session_row(pg_dsn, "blocked")
        ahead = asyncio.create_task(store.append_message("blocked", "user", "ahead"))
        await asyncio.sleep(0.2)  # the writer is stuck on `ahead`; the compaction waits in the queue
        task = asyncio.create_task(store.archive_and_compact("s", [{"role": "user", "content": "summary"}]))
        await asyncio.sleep(0.05)
        task.cancel()
        await _release(blocker)
        with pytest.raises(asyncio.CancelledError):
            await task
        await ahead
        await store.set_meta("barrier", "1")
        assert await _state(store, old, ["summary"]) == "untouched"
        assert [m["content"] for m in await store.get_messages("blocked")] == ["ahead"]
    finally:
        await store.close()


async def test_cancel_at_random_points_is_all_or_nothing(store: SessionDB) -> None:
    rng = random.Random(1234)
    seen: list[str] = []
    await store.create_session("s", "cli")
    await store.create_session("busy", "cli")
    filler = [{"role": "user", "content": "x" * 200} for _ in range(3000)]
    for round_ in range(30):
        await store.replace_messages("s", [{"role": "user", "content": f"r{round_} old {i}"} for i in range(50)])
        old = [m["id"] for m in await store.get_messages("s")]
        summary = [f"r{round_} summary {i}" for i in range(rng.choice((1, 200, 800)))]
        # A big write ahead keeps the writer busy, so the compaction is sometimes still queued.
        ahead = asyncio.create_task(store.append_messages_batch("busy", filler[: rng.choice((0, 300, 3000))]))
        await asyncio.sleep(0)
        task = asyncio.create_task(store.archive_and_compact("s", [{"role": "user", "content": c} for c in summary]))
        await asyncio.sleep(rng.uniform(0, 0.03))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await ahead
        await store.set_meta("barrier", str(round_))  # queued last: everything before it is applied
        seen.append(await _state(store, old, summary))
    # Both outcomes occur, and nothing in between (``_state`` fails on a torn transcript).
    assert set(seen) == {"untouched", "compacted"}, seen


# --------------------------------------------------------------- lease expiry


async def test_lease_expiring_mid_compaction_is_lost_to_a_successor(target: str) -> None:
    slow, fast = open_store(target), open_store(target)
    try:
        await seed(slow, "s", 4)
        assert await slow.try_acquire_compression_lock("s", "slow", ttl_seconds=0.3)
        await asyncio.sleep(0.4)  # the summary call outlives the lease
        # Meanwhile other writers are no longer held back by the expired lease.
        await fast.append_message("s", "user", "during the slow summary")
        assert await fast.try_acquire_compression_lock("s", "fast", ttl_seconds=60)
        # The slow compressor learns it lost the lease and cannot publish.
        assert not await slow.refresh_compression_lock("s", "slow")
        with pytest.raises(CompressionSessionBusyError, match="lease lost"):
            await slow.publish_compression_child(
                parent_session_id="s", child_session_id="s-slow", source="cli",
                messages=[{"role": "user", "content": "stale summary"}], compression_lock_holder="slow",
            )
        await slow.release_compression_lock("s", "slow")  # must not free the successor's lease
        assert await fast.get_compression_lock_holder("s") == "fast"
        await fast.publish_compression_child(
            parent_session_id="s", child_session_id="s-fast", source="cli",
            messages=[{"role": "user", "content": "fresh summary"}], compression_lock_holder="fast",
        )
        assert await slow.get_compression_tip("s") == "s-fast"
        assert await slow.get_session("s-slow") is None
    finally:
        await slow.close()
        await fast.close()


async def test_lease_expired_but_unclaimed_is_revived_and_publishes(store: SessionDB) -> None:
    await seed(store, "s", 2)
    assert await store.try_acquire_compression_lock("s", "slow", ttl_seconds=0.1)
    await asyncio.sleep(0.2)
    assert await store.refresh_compression_lock("s", "slow", ttl_seconds=60)
    await store.publish_compression_child(
        parent_session_id="s", child_session_id="s2", source="cli",
        messages=[{"role": "user", "content": "summary"}], compression_lock_holder="slow",
    )
    assert await store.resolve_resume_session_id("s") == "s2"


# ------------------------------------------------------------ the append guard


async def test_append_is_not_blocked_by_a_live_holders_lease(store: SessionDB) -> None:
    """A compressor process holding its lease never holds another writer's append back."""
    await seed(store, "s", 2)
    proc = spawn(HOLDER, store_target(store))
    try:
        holder = await asyncio.to_thread(read_line, proc)
        t0 = time.monotonic()
        row_id = await store.append_message("s", "user", "while the compressor works")
        assert time.monotonic() - t0 < 2.0
        assert (await store.get_messages("s"))[-1]["id"] == row_id
        assert await store.get_compression_lock_holder("s") == holder  # the lease is untouched
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_closed_session_fails_fast_even_under_a_live_lease(store: SessionDB) -> None:
    await seed(store, "p", 2)
    assert await store.try_acquire_compression_lock("p", "compressor", ttl_seconds=60)
    await store.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="cli",
        messages=[{"role": "user", "content": "summary"}], compression_lock_holder="compressor",
    )
    assert await store.get_compression_lock_holder("p") == "compressor"
    t0 = time.monotonic()
    with pytest.raises(CompressionSessionClosedError):
        await store.append_message("p", "user", "late writer")
    assert time.monotonic() - t0 < 1.0
