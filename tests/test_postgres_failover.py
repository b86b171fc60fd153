"""Issue 29 item 4: failover without surprises, on real PostgreSQL instances of the tests' own.

The instances (``tests/pg_cluster.py``) run on spare loopback ports: a
primary, a streaming standby made with ``pg_basebackup -R``, stopped with
``-m immediate`` and promoted with ``pg_ctl promote``. The machine's own
server is not touched.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
from pathlib import Path

import pytest

from hermes_state.errors import DatabaseUnavailableError, WriteNotAppliedError
from hermes_state.postgres import SessionDB
from hermes_state.postgres.dsn import asyncpg_dsn, endpoint, validate_dsn

from . import pg_cluster
from .pg_cluster import Cluster, pg_primary  # noqa: F401  (the fixture)


async def _contents(url: str) -> list[str]:
    async with SessionDB(url, read_only=True) as reader:
        return [m["content"] for m in await reader.get_messages("s")]


def _names_only_listed_hosts(message: str, *ports: int) -> None:
    assert "127.0.0.1:5432" not in message, message
    assert any(f"127.0.0.1:{port}" in message for port in ports), message


# ----------------------------------------------------------------- URL forms (no server)


@pytest.mark.parametrize(
    ("url", "hosts", "for_asyncpg"),
    [
        ("postgresql+asyncpg://u@h1:5433,h2:5434/db", "h1:5433,h2:5434", "postgresql://u@h1:5433,h2:5434/db"),
        ("postgresql+asyncpg://u@/db?host=h1,h2&port=5433,5434&x=1", "h1:5433,h2:5434", "postgresql://u@h1:5433,h2:5434/db?x=1"),
        ("postgresql+psycopg:///db?host=h1,h2&port=6000", "h1:6000,h2:6000", "postgresql://h1:6000,h2:6000/db"),
        ("postgresql+asyncpg://h1,h2/db?port=1,2", "h1:1,h2:2", "postgresql://h1:1,h2:2/db"),
        ("postgresql+asyncpg://u@h/db?commit_outcome_timeout=45", "h:5432", "postgresql://u@h/db"),
    ],
)
def test_both_multi_host_forms_are_read_and_named(url: str, hosts: str, for_asyncpg: str) -> None:
    assert validate_dsn(url) == url
    assert endpoint(url) == hosts
    assert asyncpg_dsn(url) == for_asyncpg


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("postgresql+asyncpg://h1,h2/db?port=1,2,3", "2 host(s) but 3 ports"),
        ("postgresql+asyncpg://h1:5,h2/db?port=1", "both after the hosts and in ?port="),
        ("postgresql+asyncpg://h1,,h2/db", "empty entry"),
        ("postgresql+asyncpg://h:99999/db", "not a port number"),
        ("postgresql+asyncpg:///db?port=5", "host and database name"),
        ("postgresql+asyncpg://h/db?commit_outcome_timeout=0", "commit_outcome_timeout"),
        ("postgresql+asyncpg://h/db?commit_outcome_timeout=soon", "commit_outcome_timeout"),
    ],
)
def test_bad_host_lists_are_refused_at_construction(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        SessionDB(url)


# ------------------------------------------------------------- real instances


async def test_a_writable_store_on_a_standby_is_refused_or_finds_the_primary(pg_primary: Cluster) -> None:
    standby = await asyncio.to_thread(pg_primary.add_standby)
    primary = pg_primary.primary
    for url in (pg_primary.multi_host_url(standby), pg_primary.multi_host_url(standby, query="target_session_attrs=any")):
        db = SessionDB(url)
        with pytest.raises(DatabaseUnavailableError, match="no writable PostgreSQL server") as refused:
            await db.create_session("s", "cli")
        await db.close()
        _names_only_listed_hosts(str(refused.value), standby.port)
    # A read-only store on the standby is fine; a URL listing the primary (second) finds it.
    async with SessionDB(pg_primary.multi_host_url(standby, primary)) as db:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "on the primary")
    assert await asyncio.to_thread(primary.sql, "SELECT count(*) FROM messages") == "1"
    await pg_cluster.wait_replayed(standby, "SELECT count(*) FROM messages", "1")  # replay is asynchronous here
    async with SessionDB(f"postgresql+asyncpg://postgres@/postgres?host=127.0.0.1&port={standby.port}", read_only=True) as reader:
        assert [m["content"] for m in await reader.get_messages("s")] == ["on the primary"]


async def test_a_primary_turned_read_only_mid_life_means_reconnect_to_a_writable_host(pg_primary: Cluster) -> None:
    standby = await asyncio.to_thread(pg_primary.add_standby)
    primary = pg_primary.primary
    url = pg_primary.multi_host_url(query="target_session_attrs=read-write")
    async with SessionDB(url) as db:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "before")
        # Fence the old primary the way an HA tool does, then promote the standby.
        await asyncio.to_thread(primary.sql, "ALTER SYSTEM SET default_transaction_read_only = on")
        await asyncio.to_thread(primary.sql, "SELECT pg_reload_conf()")
        while await asyncio.to_thread(primary.sql, "SHOW default_transaction_read_only") != "on":
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # every backend, the writer's too, handles the reload signal on its own
        with pytest.raises(WriteNotAppliedError) as refused:  # no writable host yet: a clear, retryable error
            await db.append_message("s", "user", "while fenced")
        message = str(refused.value)
        assert "no writable PostgreSQL server" in message and "not applied" in message, message
        _names_only_listed_hosts(message, primary.port, standby.port)
        await asyncio.to_thread(standby.promote)
        await db.append_message("s", "user", "after")  # the writer reconnected to the promoted standby
    assert await _contents(f"postgresql+asyncpg://postgres@127.0.0.1:{standby.port}/postgres") == ["before", "after"]


def _hold_commits(cluster: Cluster) -> None:
    """Make every COMMIT wait for a synchronous standby that never comes: committed locally, unacknowledged."""
    cluster.primary.sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    cluster.primary.sql("SELECT pg_reload_conf()")


async def _lost_reply(db: SessionDB, cluster: Cluster) -> asyncio.Future[int]:
    """Start an append whose COMMIT the primary holds, then crash the primary under it."""
    await db.create_session("s", "cli")
    await db.append_message("s", "user", "first")
    await asyncio.to_thread(_hold_commits, cluster)
    pending = asyncio.ensure_future(db.append_message("s", "user", "in doubt"))
    for _ in range(200):  # until the COMMIT waits on the server
        waiting = await asyncio.to_thread(
            cluster.primary.sql, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        )
        if waiting == "1":
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the COMMIT never waited for the synchronous standby")
    await asyncio.to_thread(cluster.primary.stop, "immediate")
    return pending


@pytest.mark.slow  # a server crash and restart/promotion, seconds of waiting
async def test_a_lost_commit_reply_is_resolved_across_a_restart_within_the_default_window(pg_primary: Cluster) -> None:
    primary = pg_primary.primary
    db = SessionDB(pg_primary.multi_host_url())
    try:
        pending = await _lost_reply(db, pg_primary)
        await asyncio.sleep(3)  # longer than the old 1.2 s window
        assert not pending.done()  # still resolving: not given up
        await asyncio.to_thread(primary.start)
        assert await asyncio.wait_for(pending, 30) > 0  # it did commit, and the caller is told so
    finally:
        await db.close()
    assert await _contents(pg_primary.multi_host_url()) == ["first", "in doubt"]


def test_the_outcome_window_config_key_is_validated_and_wins_over_the_url() -> None:
    from hermes_state.errors import ConfigError
    from hermes_state.postgres.backend import PostgresBackend
    from hermes_state.postgres.config import parse_postgres_config

    for bad in (0, -1, "30", True, float("inf")):
        with pytest.raises(ConfigError, match="database.postgres.commit_outcome_timeout"):
            parse_postgres_config({"commit_outcome_timeout": bad})
    backend = PostgresBackend("postgresql+asyncpg://h/db?commit_outcome_timeout=7", read_only=False)
    assert backend.commit_outcome_timeout() == 7
    backend.pg_config = parse_postgres_config({"commit_outcome_timeout": 2.5})
    assert backend.commit_outcome_timeout() == 2.5
    assert PostgresBackend("postgresql+asyncpg://h/db", read_only=False).commit_outcome_timeout() == 30


@pytest.mark.parametrize("where", ["url", "config"])
async def test_the_outcome_window_is_configurable_and_an_unknown_outcome_names_the_hosts(
    pg_primary: Cluster, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary = pg_primary.primary
    if where == "config":
        (tmp_path / "config.yaml").write_text("database:\n  postgres:\n    commit_outcome_timeout: 1\n")
        monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    db = SessionDB(pg_primary.multi_host_url(query="commit_outcome_timeout=1" if where == "url" else ""))
    try:
        pending = await _lost_reply(db, pg_primary)
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailableError, match="outcome is unknown") as unknown:
            await asyncio.wait_for(pending, 20)
        assert time.monotonic() - started < 10
        assert "within 1 s (commit_outcome_timeout)" in str(unknown.value)
        _names_only_listed_hosts(str(unknown.value), primary.port)
    finally:
        await db.close()


@pytest.mark.slow  # a server crash and restart/promotion, seconds of waiting
async def test_failover_to_a_synchronous_standby_keeps_every_acknowledged_write_once(pg_primary: Cluster) -> None:
    standby = await asyncio.to_thread(pg_primary.add_standby, synchronous=True)
    primary = pg_primary.primary
    ports = (primary.port, standby.port)
    url = f"postgresql+asyncpg://postgres@/postgres?host=127.0.0.1,127.0.0.1&port={primary.port},{standby.port}"
    acknowledged: list[str] = []
    refused: list[str] = []
    unknown: list[str] = []
    errors: list[BaseException] = []
    promoted = asyncio.Event()
    after_promotion = 0

    async def agent(db: SessionDB, name: str) -> None:
        nonlocal after_promotion
        for i in range(100_000):
            if after_promotion >= 40:
                return
            text = f"{name}-{i}"
            try:
                await db.append_message("s", "user", text)
            except (WriteNotAppliedError, DatabaseUnavailableError) as exc:
                errors.append(exc)
                (refused if isinstance(exc, WriteNotAppliedError) else unknown).append(text)
                await asyncio.sleep(0.05)
                continue
            acknowledged.append(text)
            if promoted.is_set():
                after_promotion += 1

    async def fail_over() -> None:
        while len(acknowledged) < 30:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(primary.stop, "immediate")
        await asyncio.sleep(1.0)
        await asyncio.to_thread(standby.promote)
        promoted.set()

    async with SessionDB(url) as db:
        await db.create_session("s", "cli")
        await asyncio.wait_for(asyncio.gather(fail_over(), *(agent(db, f"a{n}") for n in range(4))), 90)
        stats = await db.writer_stats()
    stored = await _contents(f"postgresql+asyncpg://postgres@127.0.0.1:{standby.port}/postgres")
    counts = collections.Counter(stored)
    assert all(counts[text] == 1 for text in acknowledged), "an acknowledged write is missing or duplicated"
    assert not set(refused) & set(stored), "a write reported not applied is stored"
    assert not unknown  # the default outcome window outlasts this failover
    assert set(stored) == set(acknowledged)
    for exc in errors:
        assert "outcome is unknown" not in str(exc)
        _names_only_listed_hosts(str(exc), *ports)
    assert stats["reconnects"] >= 1
