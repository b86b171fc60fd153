"""Issue 12: lost connections, unknown commit outcomes, timeouts and limits, against the real server.

The unknown-outcome window (COMMIT sent, reply lost) and the server going
away are produced with ``tests/pg_proxy.py``, a loopback proxy in front of
the shared server (restarting the server itself would disturb other users).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from hermes_state.errors import (
    DatabaseUnavailableError,
    LockTimeoutError,
    StatementTimeoutError,
    WriteNotAppliedError,
)
from hermes_state.postgres import SessionDB as PostgresSessionDB

from .pg_proxy import FaultProxy
from .postgres_support import admin_connect

pytestmark = pytest.mark.backends("postgres")


@pytest.fixture
async def proxy(pg_admin_dsn: str) -> AsyncIterator[FaultProxy]:
    parts = urlsplit(pg_admin_dsn)
    fault_proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.stop()


def _through(proxy: FaultProxy, pg_dsn: str) -> str:
    """``pg_dsn`` (with its schema) pointed at the proxy instead of the server."""
    parts = urlsplit(pg_dsn)
    return parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()


async def _contents(pg_dsn: str, session_id: str) -> list[str]:
    async with PostgresSessionDB(pg_dsn, read_only=True) as reader:
        return [m["content"] for m in await reader.get_messages(session_id)]


async def test_lost_commit_reply_resolves_to_the_true_outcome(proxy: FaultProxy, pg_dsn: str) -> None:
    rng = random.Random(12)
    db = PostgresSessionDB(_through(proxy, pg_dsn))
    acknowledged: list[str] = []
    refused: list[str] = []
    try:
        await db.create_session("s", "cli")
        for round_no in range(50):
            fault = rng.choice(["after_commit", "before_commit"])
            contents = [f"r{round_no}-{i}" for i in range(rng.randint(1, 4))]
            proxy.arm(fault)
            results = await asyncio.gather(
                *(db.append_message("s", "user", text) for text in contents), return_exceptions=True
            )
            assert proxy.fired == round_no + 1
            for text, result in zip(contents, results):
                if isinstance(result, BaseException):
                    assert isinstance(result, WriteNotAppliedError), result
                    assert "was not applied" in str(result)
                    refused.append(text)
                else:
                    assert isinstance(result, int)
                    acknowledged.append(text)
        stats = await db.writer_stats()
    finally:
        await db.close()
    stored = await _contents(pg_dsn, "s")
    # Lost before COMMIT: retried once on a fresh connection; lost after: found committed.
    # Either way every caller was told the truth and nothing is stored twice.
    assert sorted(stored) == sorted(acknowledged)
    assert not set(refused) & set(stored)
    assert len(stored) == len(set(stored))
    assert stats["reconnects"] >= 50
    assert stats["retried_batches"] >= 1


async def test_a_write_lost_twice_is_reported_not_applied(proxy: FaultProxy, pg_dsn: str) -> None:
    db = PostgresSessionDB(_through(proxy, pg_dsn))
    try:
        await db.create_session("s", "cli")
        proxy.arm("before_commit", times=2)  # the write's COMMIT and its one retry's
        task = asyncio.ensure_future(db.append_message("s", "user", "doomed"))
        with pytest.raises(WriteNotAppliedError, match="was not applied"):
            await task
        assert proxy.fired == 2
        assert await db.append_message("s", "user", "after") > 0
    finally:
        await db.close()
    assert await _contents(pg_dsn, "s") == ["after"]


async def test_writer_connection_killed_between_batches_is_replaced(pg_dsn: str, pg_admin_dsn: str) -> None:
    admin = await admin_connect(pg_admin_dsn)
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("s", "cli")
        for round_no in range(3):
            pid = await db._backend._writer_conn.fetchval("SELECT pg_backend_pid()")
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            await asyncio.sleep(0.05)
            assert await db.append_message("s", "user", f"m{round_no}") > 0  # no error reaches the caller
        assert (await db.writer_stats())["reconnects"] == 3
        assert [m["content"] for m in await db.get_messages("s")] == ["m0", "m1", "m2"]
    finally:
        await db.close()
        await admin.close()


async def test_read_connections_killed_idle_or_busy_are_replaced_and_the_read_retried(
    pg_dsn: str, pg_admin_dsn: str
) -> None:
    admin = await admin_connect(pg_admin_dsn)
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "hello")
        assert await db.get_session("s") is not None
        writer_pid = await db._backend._writer_conn.fetchval("SELECT pg_backend_pid()")
        others = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = '' AND pid <> $1 AND pid <> pg_backend_pid()"

        async def kill_readers() -> int:
            mine = {e.conn.get_server_pid() for e in db._backend.pool._idle}
            pids = [p for p in await admin.fetch(others, writer_pid) if p["pid"] in mine]
            for row in pids:
                await admin.fetchval("SELECT pg_terminate_backend($1)", row["pid"])
            return len(pids)

        assert await kill_readers() >= 1  # idle: the pre-ping finds it gone
        assert (await db.get_messages("s"))[0]["content"] == "hello"
        # Busy: killed while its statement runs; the read fails over to a fresh connection once.
        pool = db._backend.pool
        async with pool.acquire() as conn:
            busy_pid = conn.get_server_pid()
        slow = asyncio.ensure_future(db._backend.reader.query("get_session", "s"))
        await admin.fetchval("SELECT pg_terminate_backend($1)", busy_pid)
        assert (await slow)["id"] == "s"
        assert pool.checkedout() == 0
    finally:
        await db.close()
        await admin.close()


async def test_server_gone_fails_fast_and_the_store_recovers(proxy: FaultProxy, pg_dsn: str) -> None:
    db = PostgresSessionDB(_through(proxy, pg_dsn))
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "before")
        await proxy.stop()  # the server "goes away": connections cut, nothing listening
        started = time.monotonic()
        # The batch failed before COMMIT was sent: known not applied (its one retry cannot connect).
        with pytest.raises(WriteNotAppliedError, match=f"127.0.0.1:{proxy.port}") as write_err:
            await db.append_message("s", "user", "while-down")
        with pytest.raises(DatabaseUnavailableError, match=f"127.0.0.1:{proxy.port}"):
            await db.get_messages("s")
        assert time.monotonic() - started < 10
        assert "postgres@" not in str(write_err.value)
        await proxy.start()  # back on the same port
        assert await db.append_message("s", "user", "after") > 0
        contents = [m["content"] for m in await db.get_messages("s")]
    finally:
        await db.close()
    assert contents == ["before", "after"]


async def test_pool_exhaustion_times_out_within_pool_timeout_and_leaks_nothing(pg_dsn: str, tmp_path: Any, monkeypatch: Any) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("database:\n  postgres:\n    pool_size: 1\n    max_overflow: 0\n    pool_timeout: 0.3\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("s", "cli")
        pool = db._backend.pool
        async with pool.acquire():
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="size 1 overflow 0 reached"):
                await db.get_session("s")
            assert 0.25 <= time.monotonic() - started < 2
        assert pool.checkedout() == 0
        assert (await db.get_session("s"))["id"] == "s"
        assert pool.checkedout() == 0
    finally:
        await db.close()


async def test_statement_and_lock_timeouts_are_clear_errors_and_the_connection_stays_usable(
    pg_dsn: str, pg_admin_dsn: str
) -> None:
    schema = dict(p.split("=") for p in urlsplit(pg_dsn).query.split("&"))["search_path"]
    admin = await admin_connect(pg_admin_dsn)
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("s", "cli")
        await db._backend._writer_conn.execute("SET lock_timeout = 200")  # as connect_args.server_settings would
        # lock_timeout: another connection holds the session row.
        async with admin.transaction():
            await admin.execute(f'SELECT 1 FROM "{schema}".sessions WHERE id = $1 FOR UPDATE', "s")
            started = time.monotonic()
            with pytest.raises(LockTimeoutError, match="lock_timeout"):
                await db.append_message("s", "user", "blocked")
            assert time.monotonic() - started < 5  # not retried for the facade's whole patience
        assert await db.append_message("s", "user", "free") > 0
        # statement_timeout on a read connection: the query is cancelled, the connection reused.
        pool = db._backend.pool
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            await conn.execute("SET statement_timeout = 100")
        with pytest.raises(StatementTimeoutError, match="statement_timeout"):
            await _slow_read(db)
        async with pool.acquire() as conn:
            assert conn.get_server_pid() == pid
            await conn.execute("RESET statement_timeout")
        assert [m["content"] for m in await db.get_messages("s")] == ["free"]
        assert pool.checkedout() == 0
    finally:
        await db.close()
        await admin.close()


async def _slow_read(db: Any) -> Any:
    """Run a deliberately slow statement through the reader's own error mapping."""
    from hermes_state.postgres import queries

    async def sleepy(conn: Any) -> Any:
        return await conn.fetchval("SELECT pg_sleep(2)")

    queries.QUERIES["_test_sleep"] = sleepy
    try:
        return await db._backend.reader.query("_test_sleep")
    finally:
        del queries.QUERIES["_test_sleep"]


async def test_cancelled_read_mid_transaction_rolls_back_and_frees_the_connection(pg_dsn: str) -> None:
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("s", "cli")
        task = asyncio.ensure_future(_slow_read(db))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pool = db._backend.pool
        assert pool.checkedout() == 0
        assert (await db.get_session("s"))["id"] == "s"
    finally:
        await db.close()


async def test_writer_backend_terminated_at_random_moments_in_flight(pg_dsn: str, pg_admin_dsn: str) -> None:
    rng = random.Random(1212)
    admin = await admin_connect(pg_admin_dsn)
    db = PostgresSessionDB(pg_dsn)
    acknowledged: list[str] = []
    try:
        await db.create_session("s", "cli")
        for round_no in range(50):
            conn = db._backend._writer_conn  # None or dead after a kill that landed between batches
            pid = conn.get_server_pid() if conn is not None else None
            contents = [f"r{round_no}-{i}" for i in range(rng.randint(1, 6))]
            writes = asyncio.gather(
                *(db.append_message("s", "user", text) for text in contents), return_exceptions=True
            )
            await asyncio.sleep(rng.uniform(0, 0.01))
            if pid is not None:
                await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            for text, result in zip(contents, await writes):
                if isinstance(result, BaseException):
                    assert isinstance(result, WriteNotAppliedError), repr(result)
                else:
                    acknowledged.append(text)
        stats = await db.writer_stats()
    finally:
        await db.close()
        await admin.close()
    stored = await _contents(pg_dsn, "s")
    assert sorted(stored) == sorted(acknowledged)  # every acknowledged row once, no refused one
    assert stats["reconnects"] >= 25  # the kills really cut the writer's connection
