"""The PostgreSQL store behind a real PgBouncer in transaction pooling mode (issue 29, items 1-3).

Each test starts PgBouncer (``tests.pg_instances``) on a spare loopback
port in front of the test server and stops it afterwards. The store reaches
its schema through ``search_path``, a startup parameter PgBouncer refuses:
with ``pooler=transaction`` it travels inside each transaction instead.
"""

from __future__ import annotations

import asyncio
import time
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from hermes_state.errors import ConfigError
from hermes_state.postgres import SessionDB, TransactionPoolerError
from hermes_state.postgres.dsn import redact_dsn, url_store_options
from hermes_state.postgres.schema import MIGRATION_LOCK_KEY

from .pg_instances import PgBouncer, start_pgbouncer, stop_pgbouncer
from .postgres_support import admin_connect, server_dsn, store_dsn, temporary_schema

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def pg_bouncer() -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the test server; stopped after the test."""
    bouncer = start_pgbouncer(server_dsn())
    try:
        yield bouncer
    finally:
        stop_pgbouncer(bouncer)


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    async for schema in temporary_schema(server_dsn()):
        yield schema


def pooled_url(bouncer: PgBouncer, schema: str, *extra: str) -> str:
    """The store URL through ``bouncer`` pinned to ``schema``, with ``extra`` query parameters."""
    return "&".join([store_dsn(bouncer.admin_dsn, schema), *extra])


def run_workers(*argv_lists: list[str], timeout: float = 240) -> list[dict[str, Any]]:
    """Run ``python -m tests.pooler_worker`` processes at once; returns each one's JSON line."""
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.pooler_worker", *argv], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv in argv_lists
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


# ----------------------------------------------------------------------------- item 1


@pytest.mark.slow  # four worker processes, each opening a fresh schema and running ~75 calls
async def test_processes_through_pgbouncer_make_no_errors(pg_bouncer: PgBouncer, pg_schema: str) -> None:
    """4 processes x 4 agents open a fresh schema at once and use every kind of call: no error at all."""
    url = pooled_url(pg_bouncer, pg_schema, "pooler=transaction")
    workers, agents, rounds = 4, 4, 2
    results = run_workers(*(["mixed", url, f"w{w}", str(agents), str(rounds)] for w in range(workers)))
    assert [r["errors"] for r in results] == [[]] * workers
    assert all(r["appended"] == {f"w{w}-a{a}": 4 * rounds for a in range(agents)} for w, r in enumerate(results))
    conn = await admin_connect(server_dsn())
    try:
        counts = dict(await conn.fetch(
            f'SELECT session_id, count(*) FROM "{pg_schema}".messages GROUP BY session_id'))
        versions = await conn.fetchval(f'SELECT count(*) FROM "{pg_schema}".schema_version')
    finally:
        await conn.close()
    assert versions == 1
    assert counts.pop("shared") == workers * agents * rounds  # one message per turn, each under the lease
    # Every agent's own appends, archived by its compaction, plus the summary.
    assert counts == {f"w{w}-a{a}": 4 * rounds + 1 for w in range(workers) for a in range(agents)}


async def test_pooler_mode_leaves_no_named_statement_on_the_server(pg_dsn: str) -> None:
    """With ``pooler=transaction`` nothing the store runs is prepared by name: the server's sessions hold none."""
    db = SessionDB(f"{pg_dsn}&pooler=transaction")
    try:
        await db.create_session("s", "cli", model="m")
        await db.append_message("s", "user", "hello pelican")
        await db.append_messages_batch("s", [{"role": "assistant", "content": f"a{i}"} for i in range(3)])
        assert len(await db.get_messages("s")) == 4
        assert await db.search_messages("pelican")
        await db.set_session_title("s", "a title")
        async with db.session_turn("s", "me", ttl_seconds=30) as turn:
            await turn.append_message("s", "user", "fenced")
        await db.archive_and_compact("s", [{"role": "user", "content": "summary"}])
        await db.vacuum()
        backend = db._backend
        assert await backend._writer_conn.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
        async with backend.pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM pg_prepared_statements") == 0
    finally:
        await db.close()
    # The same calls without it do leave named statements (the check above can fail).
    db = SessionDB(pg_dsn)
    try:
        await db.create_session("s2", "cli")
        assert await db._backend._writer_conn.fetchval("SELECT count(*) FROM pg_prepared_statements") > 0
    finally:
        await db.close()


async def test_migration_lock_holds_through_pgbouncer(pg_bouncer: PgBouncer, pg_schema: str) -> None:
    """The open's transaction-scoped advisory lock is a real lock through the pooler: it waits for a holder."""
    conn = await admin_connect(server_dsn())
    db = SessionDB(pooled_url(pg_bouncer, pg_schema, "pooler=transaction"))
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        opening = asyncio.create_task(db.create_session("s", "cli"))
        await asyncio.sleep(1.5)
        assert not opening.done(), "the open did not wait for the migration lock"
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
        assert await asyncio.wait_for(opening, 30) == "s"
        assert await db.get_session("s") is not None
    finally:
        await conn.execute("SELECT pg_advisory_unlock_all()")
        await conn.close()
        await db.close()


async def test_lost_prepared_statement_is_named_with_its_fix(pg_schema: str, caplog: pytest.LogCaptureFixture) -> None:
    """Without ``pooler=transaction``: a warning at open, and a statement the pooler's server lost is one clear error."""
    # The schema comes from PgBouncer's own connect_query, so the store needs no startup parameter
    # and gets as far as its prepared statements; one server connection makes the loss certain.
    bouncer = start_pgbouncer(server_dsn(), pool_size=1, connect_query=f"SET search_path = {pg_schema}")
    db = SessionDB(store_dsn(bouncer.admin_dsn))
    other = await admin_connect(bouncer.admin_dsn)
    try:
        with caplog.at_level(logging.WARNING, logger="hermes_state.postgres"):
            await db.create_session("s", "cli")
        assert any("goes through a connection pooler" in r.getMessage() for r in caplog.records)
        await db.append_message("s", "user", "one")
        assert [m["content"] for m in await db.get_messages("s")] == ["one"]
        await other.execute("DEALLOCATE ALL")  # lands on the one server connection, as another client's reset would
        with pytest.raises(TransactionPoolerError, match="pooler=transaction") as read_error:
            await db.get_messages("s")
        assert "does not exist" in str(read_error.value)
        await other.execute("DEALLOCATE ALL")
        with pytest.raises(TransactionPoolerError, match="pooler=transaction"):
            await db.append_message("s", "user", "two")
    finally:
        await other.close()
        await db.close()
        stop_pgbouncer(bouncer)


async def test_duplicate_prepared_statement_is_a_pooler_error() -> None:
    """The server's 'already exists' for a prepared statement name maps to the same error."""
    from hermes_state.postgres.errors import is_disconnect, to_store_error

    conn = await admin_connect(server_dsn())
    try:
        await conn.execute("PREPARE __asyncpg_stmt_1__ AS SELECT 1")
        with pytest.raises(Exception) as raw:
            await conn.execute("PREPARE __asyncpg_stmt_1__ AS SELECT 2")
    finally:
        await conn.close()
    assert type(raw.value).__name__ == "DuplicatePreparedStatementError"
    mapped = to_store_error(raw.value)
    assert isinstance(mapped, TransactionPoolerError) and "already exists" in str(mapped)
    assert not is_disconnect(raw.value)


# ----------------------------------------------------------------------------- item 3


async def test_read_only_and_settings_through_pgbouncer(
    pg_bouncer: PgBouncer, pg_schema: str, hermes_home: Path
) -> None:
    """``read_only=True`` and ``server_settings`` from config.yaml hold in every transaction, via ``pooler``.

    The timeouts are long: the open waits for the migration lock, which other tests' stores (on the
    same database, under load) may hold for a while.
    """
    (hermes_home / "config.yaml").write_text(
        "database:\n  postgres:\n    pooler: transaction\n    connect_args:\n"
        "      server_settings: {statement_timeout: '654321', lock_timeout: '600000', application_name: hermes-pooled}\n"
    )
    url = pooled_url(pg_bouncer, pg_schema)
    writer = SessionDB(url)
    reader = SessionDB(url, read_only=True)
    try:
        await writer.create_session("s", "cli")
        await writer.append_message("s", "user", "hello")
        assert [m["content"] for m in await reader.get_messages("s")] == ["hello"]
        assert (await reader.storage_info())["schema"] == pg_schema
        for db, read_only in ((writer, "off"), (reader, "on")):
            async with db._backend.pool.acquire() as conn, conn.transaction():
                assert await conn.fetchval("SHOW statement_timeout") == "654321ms"
                assert await conn.fetchval("SHOW lock_timeout") == "10min"
                assert await conn.fetchval("SHOW application_name") == "hermes-pooled"
                assert await conn.fetchval("SHOW transaction_read_only") == read_only
        with pytest.raises(PermissionError):
            await reader.append_message("s", "user", "refused")
    finally:
        await reader.close()
        await writer.close()


async def test_startup_parameters_without_pooler_mode_name_the_fix(pg_bouncer: PgBouncer, pg_schema: str) -> None:
    """Without ``pooler=transaction`` PgBouncer refuses the settings at connect: one clear error."""
    for read_only in (True, False):
        db = SessionDB(pooled_url(pg_bouncer, pg_schema), read_only=read_only)
        try:
            with pytest.raises(TransactionPoolerError, match="unsupported startup parameter.*pooler=transaction"):
                await db.get_session("s")
        finally:
            await db.close()


def test_pooler_and_listen_url_options_are_checked() -> None:
    """Bad values are refused by name when the store is built (URL) or opened (config); passwords stay hidden."""
    base = "postgresql+asyncpg://u@h/db"
    with pytest.raises(ValueError, match="pooler must be one of none, transaction"):
        SessionDB(f"{base}?pooler=session")
    with pytest.raises(ValueError, match="listen_url"):
        SessionDB(f"{base}?listen_url=nonsense")
    for key in ("statement_cache_size", "prepare_threshold", "prepared_statements"):
        with pytest.raises(ValueError, match=f"'{key}' is not a server setting.*pooler=transaction"):
            SessionDB(f"{base}?{key}=0")
    listen = "postgresql+asyncpg://u:secret@direct:5432/db"
    db = SessionDB(f"{base}?pooler=transaction&listen_url={quote(listen, safe='')}")
    assert "secret" not in db.db_path and "listen_url=" in db.db_path
    assert url_store_options(db._dsn) == {"pooler": "transaction", "listen_url": listen}
    assert "secret" not in redact_dsn(listen)
    from hermes_state.postgres.config import parse_postgres_config

    with pytest.raises(ConfigError, match="database.postgres.pooler"):
        parse_postgres_config({"pooler": "statement"})
    with pytest.raises(ConfigError, match="database.postgres.listen_url"):
        parse_postgres_config({"listen_url": "mysql://x"})
    assert parse_postgres_config({"pooler": "transaction", "listen_url": listen}).listen_url == listen
    # The same as keywords (they win over the URL's parameters), checked by name before any I/O.
    with pytest.raises(ValueError, match="pooler must be one of none, transaction, not 'session'"):
        SessionDB(base, pooler="session")
    with pytest.raises(TypeError, match="pooler must be a str"):
        SessionDB(base, pooler=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^listen_url: "):
        SessionDB(base, listen_url="nonsense")
    with pytest.raises(TypeError, match="listen_url must be a str"):
        SessionDB(base, listen_url=b"postgresql+asyncpg://u@h/db")  # type: ignore[arg-type]
    db = SessionDB(f"{base}?pooler=none", pooler="transaction", listen_url=listen)
    assert "secret" not in db.db_path and "secret" not in repr(db)
    assert db._backend.store_options == {"pooler": "transaction", "listen_url": listen}


# ----------------------------------------------------------------------------- item 2


async def checked_listener(db: SessionDB) -> Any:
    """The store's lease listener once its background check has decided (at most 10 s)."""
    listener = db._backend._lease_listener
    for _ in range(200):
        if listener.deaf or listener.verified:
            break
        await asyncio.sleep(0.05)
    return listener


async def test_listener_behind_pooler_warns_once(
    pg_bouncer: PgBouncer, pg_schema: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LISTEN through the pooler hears nothing: the open-time check logs one warning naming listen_url."""
    from hermes_state.postgres import lease_listener

    monkeypatch.setattr(lease_listener, "PROBE_SECONDS", 1.0)
    db = SessionDB(pooled_url(pg_bouncer, pg_schema, "pooler=transaction"))
    try:
        with caplog.at_level(logging.WARNING, logger="hermes_state.postgres"):
            await db.create_session("s", "cli")
            listener = await checked_listener(db)
            assert listener.deaf and not listener.verified
            assert not await db._backend.watch_lease_releases()  # no second attempt, no second warning
            async with db.session_turn("s", "me", ttl_seconds=30):
                pass  # leases still work (waiters poll)
        warnings = [r.getMessage() for r in caplog.records if "LISTEN" in r.getMessage()]
        assert len(warnings) == 1 and "listen_url" in warnings[0] and "poll" in warnings[0]
    finally:
        await db.close()


async def test_pooler_and_listen_url_as_keywords(pg_bouncer: PgBouncer, pg_schema: str) -> None:
    """``pooler=`` and ``listen_url=`` given to the constructor: the pooled shape, and a listener that hears."""
    db = SessionDB(pooled_url(pg_bouncer, pg_schema), pooler="transaction", listen_url=store_dsn(server_dsn()))
    other = SessionDB(pooled_url(pg_bouncer, pg_schema), pooler="transaction")
    try:
        await db.create_session("s", "cli")
        assert db._backend._pooled
        assert (await checked_listener(db)).verified  # up (at open, behind a pooler) and heard its own probe
        assert await other.try_acquire_session_turn_lease("s", "holder", ttl_seconds=60)
        started = time.monotonic()
        waiting = asyncio.create_task(db.acquire_session_turn_lease("s", "waiter", wait_seconds=30, poll_interval_seconds=20))
        await asyncio.sleep(0.5)
        notices = db._backend._lease_listener.notices
        await other.release_session_turn_lease("s", "holder")
        assert await asyncio.wait_for(waiting, 10)  # woken by the NOTIFY, not the 20 s poll
        assert time.monotonic() - started < 5
        listener = db._backend._lease_listener
        for _ in range(100):  # the store's own process woke it first; the NOTIFY comes by the listener
            if listener.notices > notices:
                break
            await asyncio.sleep(0.05)
        assert listener.notices > notices  # heard through listen_url (through the pooler it hears nothing)
    finally:
        await db.close()
        await other.close()


async def test_listen_url_wakes_another_process_at_once(pg_bouncer: PgBouncer, pg_schema: str) -> None:
    """With ``listen_url`` (direct) a waiter in another process wakes on release, not at its 5 s poll."""
    direct = store_dsn(server_dsn())
    url = pooled_url(pg_bouncer, pg_schema, "pooler=transaction", f"listen_url={quote(direct, safe='')}")
    db = SessionDB(url)
    waiter = None
    try:
        await db.create_session("s", "cli")
        assert await db.try_acquire_session_turn_lease("s", "holder", ttl_seconds=60)
        waiter = subprocess.Popen([sys.executable, "-m", "tests.pooler_worker", "wait", url, "s"], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert waiter.stdout is not None
        line = await asyncio.to_thread(waiter.stdout.readline)
        assert line.strip() == "waiting", line
        await asyncio.sleep(1.0)  # the waiter has looked once and sleeps until a wake-up or its 5 s poll
        await db.release_session_turn_lease("s", "holder")
        out, err = await asyncio.to_thread(waiter.communicate, timeout=60)
        assert waiter.returncode == 0, err[-3000:]
        waited = json.loads(out.strip().splitlines()[-1])["waited"]
        assert waited < 4.0, waited  # about 1 s; polling alone would take 5 s
        assert db._backend._lease_listener.verified  # the direct listener heard its own check
    finally:
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
            waiter.wait()
        await db.close()



async def test_direct_store_gives_no_pooler_warning(pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """On the server itself the open-time pooler check stays quiet, and the LISTEN check passes."""
    db = SessionDB(pg_dsn)
    try:
        with caplog.at_level(logging.WARNING, logger="hermes_state.postgres"):
            await db.create_session("s", "cli")
            assert await db._backend.watch_lease_releases()
            listener = await checked_listener(db)
            assert listener.verified and not listener.deaf
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        await db.close()


async def test_host_sql_through_pgbouncer(pg_schema: str) -> None:
    """``SessionDB._read``/``_write`` (SQLAlchemy Core) work through the pooler, even when its server loses statements.

    SQLAlchemy prepares each statement through asyncpg's ``prepare()``, which
    names none while asyncpg's statement cache is off (as ``pooler`` sets it),
    so nothing it caches refers to a server connection's statement.
    """
    from sqlalchemy import text

    bouncer = start_pgbouncer(server_dsn(), pool_size=1)
    db = SessionDB(pooled_url(bouncer, pg_schema, "pooler=transaction"))
    other = await admin_connect(bouncer.admin_dsn)

    async def count(connection: Any) -> int:
        return int((await connection.execute(text("SELECT count(*) FROM sessions"))).scalar_one())

    async def rename(connection: Any) -> None:
        await connection.execute(text("UPDATE sessions SET title = :t WHERE id = 's'"), {"t": "renamed"})

    try:
        await db.create_session("s", "cli")
        for _ in range(3):  # a statement cached by name would be gone after the DEALLOCATE
            assert await db._read(count) == 1
            await db._write(rename)
            await other.execute("DEALLOCATE ALL")
        assert await db.get_session_title("s") == "renamed"
    finally:
        await other.close()
        await db.close()
        stop_pgbouncer(bouncer)
