"""The read pool's QueuePool rules (spec §2.3) against the real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hermes_state.postgres.config import parse_postgres_config
from hermes_state.postgres.dsn import endpoint
from hermes_state.postgres.errors import is_disconnect
from hermes_state.postgres.client_files import Connector
from hermes_state.postgres.pool import ConnectionPool, PoolTimeoutError

from .postgres_support import admin_connect

pytestmark = pytest.mark.backends("postgres")


@pytest.fixture
async def make_pool(pg_admin_dsn: str) -> AsyncIterator[Any]:
    pools: list[ConnectionPool] = []

    async def make(**options: Any) -> ConnectionPool:
        config = parse_postgres_config(options)
        connector = Connector(pg_admin_dsn, config.connect_kwargs(read_only=False))
        pool = ConnectionPool(connector, config, endpoint(pg_admin_dsn))
        await pool.open()
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.close()


async def _pid(pool: ConnectionPool) -> int:
    async with pool.acquire() as conn:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def _terminate(admin_dsn: str, pid: int) -> None:
    """End server process ``pid`` from another connection, then give the notice time to arrive."""
    admin = await admin_connect(admin_dsn)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    await asyncio.sleep(0.1)


async def test_grows_lazily_and_reports_metrics(make_pool: Any) -> None:
    pool = await make_pool(pool_size=2, max_overflow=1)
    assert (pool.size(), pool.checkedin(), pool.checkedout(), pool.overflow()) == (2, 0, 0, -2)
    async with pool.acquire(), pool.acquire():
        assert (pool.checkedin(), pool.checkedout(), pool.overflow()) == (0, 2, 0)
    assert (pool.checkedin(), pool.checkedout(), pool.overflow()) == (2, 0, 0)


async def test_capacity_timeout_and_arrival_order(make_pool: Any) -> None:
    pool = await make_pool(pool_size=1, max_overflow=1, pool_timeout=0.2)
    async with pool.acquire(), pool.acquire():
        with pytest.raises(PoolTimeoutError, match="size 1 overflow 1 reached, connection timed out, timeout 0.2") as caught:
            async with pool.acquire():
                pass
        assert isinstance(caught.value, TimeoutError)
    pool = await make_pool(pool_size=1, max_overflow=0, pool_timeout=5)
    served: list[str] = []

    async def wait_then_use(name: str) -> None:
        async with pool.acquire():
            served.append(name)

    async with pool.acquire():
        waiters = [asyncio.ensure_future(wait_then_use(n)) for n in ("first", "second", "third")]
        await asyncio.sleep(0.05)
        assert served == []
    await asyncio.gather(*waiters)
    assert served == ["first", "second", "third"]
    assert pool.checkedout() == 0


async def test_zero_timeout_fails_at_once_and_minus_one_overflow_is_unbounded(make_pool: Any) -> None:
    pool = await make_pool(pool_size=1, max_overflow=0, pool_timeout=0)
    async with pool.acquire():
        with pytest.raises(PoolTimeoutError):
            async with pool.acquire():
                pass
    unbounded = await make_pool(pool_size=1, max_overflow=-1, pool_timeout=0)
    async with unbounded.acquire(), unbounded.acquire(), unbounded.acquire():
        assert unbounded.checkedout() == 3
    assert unbounded.checkedin() == 1  # the overflow connections were closed on return


async def test_overflow_connections_close_on_return(make_pool: Any) -> None:
    pool = await make_pool(pool_size=1, max_overflow=2)
    async with pool.acquire(), pool.acquire(), pool.acquire():
        assert pool.overflow() == 2
    assert (pool.checkedin(), pool.overflow()) == (1, 0)


@pytest.mark.parametrize(("lifo", "expected"), [(False, 0), (True, 1)])
async def test_fifo_or_lifo_reuse(make_pool: Any, lifo: bool, expected: int) -> None:
    pool = await make_pool(pool_size=2, max_overflow=0, pool_use_lifo=lifo, pool_pre_ping=False)
    pids = []
    async with pool.acquire() as a:
        async with pool.acquire() as b:
            pids = [await a.fetchval("SELECT pg_backend_pid()"), await b.fetchval("SELECT pg_backend_pid()")]
    # a was returned first (inner block b exited first, then a): returns were b, a.
    returned_first, returned_last = pids[1], pids[0]
    assert await _pid(pool) == (returned_first if expected == 0 else returned_last)


async def test_recycle_replaces_old_connections(make_pool: Any) -> None:
    pool = await make_pool(pool_size=1, pool_recycle=0.2, pool_pre_ping=False)
    first = await _pid(pool)
    assert await _pid(pool) == first
    await asyncio.sleep(0.3)
    assert await _pid(pool) != first


async def test_pre_ping_replaces_a_terminated_connection(make_pool: Any, pg_admin_dsn: str) -> None:
    pool = await make_pool(pool_size=2, max_overflow=0, pool_pre_ping=True)
    pid = await _pid(pool)
    await _terminate(pg_admin_dsn, pid)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT 42") == 42
        assert await conn.fetchval("SELECT pg_backend_pid()") != pid
    assert pool.checkedout() == 0


async def test_without_pre_ping_a_connection_known_closed_is_replaced(make_pool: Any, pg_admin_dsn: str) -> None:
    pool = await make_pool(pool_size=1, max_overflow=0, pool_pre_ping=False)
    pid = await _pid(pool)
    await _terminate(pg_admin_dsn, pid)
    # The server's termination notice reached the driver, so the idle connection counts as closed.
    assert pool._idle[0].conn.is_closed()
    assert await _pid(pool) != pid
    assert pool.checkedout() == 0


async def test_cancel_mid_statement_frees_the_slot_and_rolls_back(make_pool: Any, pg_admin_dsn: str) -> None:
    pool = await make_pool(pool_size=1, max_overflow=0, pool_timeout=5)
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    table = "hs_pool_cancel_probe"

    async def slow() -> None:
        async with pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute(f"CREATE TEMP TABLE {table} (x int)")
                started.set_result(conn.get_server_pid())
                await conn.execute("SELECT pg_sleep(30)")

    task = asyncio.ensure_future(slow())
    pid = await started
    # Cancel only once the server runs the sleep: a cancel request that lands before the
    # statement starts is a no-op in PostgreSQL, and the caller would wait the whole 30 s.
    admin = await admin_connect(pg_admin_dsn)
    try:
        for _ in range(500):
            if await admin.fetchval("SELECT wait_event FROM pg_stat_activity WHERE pid = $1", pid) == "PgSleep":
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the statement never started sleeping")
    finally:
        await admin.close()
    cancelled_at = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - cancelled_at < 10  # the server stopped the statement
    assert pool.checkedout() == 0
    async with pool.acquire() as conn:
        assert await conn.fetchval(f"SELECT to_regclass('pg_temp.{table}')") is None


async def test_disconnect_mid_statement_invalidates_the_older_connections(make_pool: Any, pg_admin_dsn: str) -> None:
    pool = await make_pool(pool_size=2, max_overflow=0, pool_pre_ping=False)
    async with pool.acquire() as first, pool.acquire() as second:
        busy, sibling = first.get_server_pid(), second.get_server_pid()
    admin = await admin_connect(pg_admin_dsn)
    try:
        with pytest.raises(Exception) as lost:  # noqa: PT011 (the driver's class for a killed backend varies)
            async with pool.acquire() as conn:
                pid = conn.get_server_pid()
                statement = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(5)"))
                await asyncio.sleep(0.2)
                await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
                await statement
    finally:
        await admin.close()
    assert is_disconnect(lost.value)
    assert pid in (busy, sibling) and pool.checkedout() == 0
    # The sibling is alive, but older than the failure: replaced at its next checkout (spec §2.3).
    assert await _pid(pool) not in (busy, sibling)


@pytest.mark.parametrize("pre_ping", [True, False])
async def test_the_callers_first_command_runs_once_and_is_the_pre_ping(
    make_pool: Any, pg_admin_dsn: str, pre_ping: bool
) -> None:
    pool = await make_pool(pool_size=1, max_overflow=0, pool_pre_ping=pre_ping)
    first = "SET application_name = 'hermes-first'"
    seen: list[str] = []
    async with pool.acquire(first=first) as conn:  # a new connection
        assert await conn.fetchval("SHOW application_name") == "hermes-first"
        await conn.execute("RESET application_name")
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        conn.add_query_logger(lambda record: seen.append(record.query))
    async with pool.acquire(first=first) as conn:  # reused: the command is its ping, no SELECT 1
        assert await conn.fetchval("SHOW application_name") == "hermes-first"
    assert seen[:2] == [first, "SHOW application_name"]
    if pre_ping:  # a connection gone meanwhile is replaced, and the command runs on the new one
        await _terminate(pg_admin_dsn, pid)
        async with pool.acquire(first=first) as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") != pid
            assert await conn.fetchval("SHOW application_name") == "hermes-first"
    assert pool.checkedout() == 0
