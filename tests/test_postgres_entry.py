"""PostgreSQL entry points, constructor rules (spec §1), lifecycle and the class surface."""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hermes_state_postgres
from hermes_state import SessionDB as SQLiteSessionDB
from hermes_state.errors import DatabaseUnavailableError, StoreClosedError
from hermes_state.postgres import SessionDB

pytestmark = pytest.mark.backends("postgres")

SECRET = "s3cr3t-pw"


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_entry_points_are_one_class() -> None:
    assert hermes_state_postgres.SessionDB is SessionDB
    assert issubclass(SessionDB, SQLiteSessionDB)
    assert hermes_state_postgres.SCHEMA_VERSION == 25


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "explicit"),
        (Path("state.db"), "postgresql\\+asyncpg:// or postgresql\\+psycopg:// URL .*fallback is disabled"),
        ("state.db", "fallback is disabled"),
        ("postgresql://u@h/db", "fallback is disabled"),
        ("postgres://u@h/db", "fallback is disabled"),
        ("postgresql+pg8000://u@h/db", "fallback is disabled"),
        ("postgresql+psycopg://u@h", "host and database name"),
        ("postgresql+psycopg://u@h/db?keepalives=1", "'keepalives' is a libpq setting asyncpg has no equivalent"),
        ("postgresql+psycopg://u@h/db?connect_timeout=0", "connect_timeout must be a whole number of seconds >= 1"),
        ("postgresql+asyncpg://u@h/db?connect_timeout=2.5", "connect_timeout must be a whole number"),
        ("postgresql+psycopg://u@h/db?options=-B%201", "options: '-B' is not a -c name=value"),
        ("postgresql+psycopg://u@h/db?options=-c%20default_transaction_read_only%3Doff", "controlled by read_only"),
        ("POSTGRESQL+ASYNCPG://u@h/db", "fallback is disabled"),
        ("postgresql+asyncpg://", "host and database name"),
        ("postgresql+asyncpg://host", "host and database name"),
        ("postgresql+asyncpg://host/", "host and database name"),
        ("postgresql+asyncpg:///db?port=5432", "host and database name"),
    ],
)
def test_constructor_rejects_bad_dsns(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SessionDB(value)  # type: ignore[arg-type]


def test_constructor_is_state_only_and_hides_the_password() -> None:
    db = SessionDB(f"postgresql+asyncpg://alice:{SECRET}@127.0.0.1:{_closed_port()}/db")
    assert db._backend.pool is None  # type: ignore[attr-defined]
    assert db._opened is False
    assert SECRET not in repr(db)
    assert SECRET not in str(db.db_path)
    assert "alice:***@" in repr(db)


@pytest.mark.parametrize("dsn", ["postgresql://postgres@127.0.0.1:5432/test", "postgresql+asyncpg://u@h:1/db"])
def test_sqlite_store_refuses_postgres_dsns_and_creates_nothing(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(ValueError, match="hermes_state_postgres"):
        SQLiteSessionDB(dsn)
    assert list(cwd.iterdir()) == []


def test_class_surface_matches_sqlite() -> None:
    def public(cls: type) -> dict[str, object]:
        return {n: inspect.getattr_static(cls, n) for n in dir(cls) if not n.startswith("_")}

    sqlite_names, pg_names = public(SQLiteSessionDB), public(SessionDB)
    assert set(pg_names) == set(sqlite_names)
    for name, attr in sqlite_names.items():
        mine = getattr(SessionDB, name)
        theirs = getattr(SQLiteSessionDB, name)
        if not callable(theirs):
            continue
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(theirs), name
        assert isinstance(pg_names[name], staticmethod) == isinstance(attr, staticmethod), name
        assert inspect.signature(mine) == inspect.signature(theirs), name


async def test_read_only_writes_raise_permission_error_before_any_io() -> None:
    db = SessionDB(f"postgresql+asyncpg://u:{SECRET}@127.0.0.1:{_closed_port()}/db", read_only=True)
    for call in (
        lambda: db.create_session("s", "cli"),
        lambda: db.append_message("s", "user", "x"),
        lambda: db.set_meta("k", "v"),
        lambda: db.end_session("s", "done"),
    ):
        with pytest.raises(PermissionError, match="read-only"):
            await call()
    assert db._opened is False
    await db.close()


async def test_server_down_names_host_and_port_not_password() -> None:
    port = _closed_port()
    db = SessionDB(f"postgresql+asyncpg://u:{SECRET}@127.0.0.1:{port}/db")
    with pytest.raises(DatabaseUnavailableError) as caught:
        await db.get_session("s")
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert SECRET not in str(caught.value)
    assert isinstance(caught.value, ConnectionError)
    # Still usable: the next call tries again (and fails the same way while the server is down).
    with pytest.raises(DatabaseUnavailableError):
        await db.get_session("s")
    await db.close()


async def test_close_unused_store_never_connects_and_is_idempotent() -> None:
    db = SessionDB(f"postgresql+asyncpg://u@127.0.0.1:{_closed_port()}/db")
    await db.close()
    await db.close()
    with pytest.raises(StoreClosedError):
        await db.get_session("s")
    with pytest.raises(StoreClosedError):
        await db.create_session("s", "cli")


async def test_close_drains_queued_writes(pg_dsn: str) -> None:
    db = SessionDB(pg_dsn)
    await db.create_session("s", "cli")
    pending = [asyncio.ensure_future(db.append_message("s", "user", f"m{i}")) for i in range(50)]
    await asyncio.sleep(0)
    await db.close()
    ids = await asyncio.gather(*pending)
    assert ids == sorted(ids)
    async with SessionDB(pg_dsn) as again:
        assert await again.message_count("s") == 50


async def test_cancelled_close_still_closes(pg_dsn: str) -> None:
    db = SessionDB(pg_dsn)
    await db.create_session("s", "cli")
    task = asyncio.ensure_future(db.close())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await db.close()
    assert db.closed


def test_store_follows_a_new_event_loop(pg_dsn: str) -> None:
    db = SessionDB(pg_dsn)
    asyncio.run(db.create_session("s", "cli"))  # its loop closes with the store open
    assert asyncio.run(db.get_session("s"))["id"] == "s"  # the pool and writer are made anew here
    asyncio.run(db.close())


# A fixture that fails reports an error, which fails the run as surely as a failed test.
@pytest.mark.slow  # two pytest runs in subprocesses
@pytest.mark.parametrize(("require", "expected"), [("", "1 skipped"), ("1", "1 error")])
def test_without_a_server_tests_skip_or_fail_under_ci(require: str, expected: str) -> None:
    root = Path(__file__).resolve().parents[1]
    hidden = ("HERMES_TEST_POSTGRES_DSN", "HERMES_REQUIRE_POSTGRES", "HERMES_FORBID_SKIPS")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    if require:
        env["HERMES_REQUIRE_POSTGRES"] = require
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-rs", "-p", "no:cacheprovider",
         "tests/test_postgres_core.py::test_paging_after_id"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )
    assert expected in result.stdout, result.stdout + result.stderr
    assert "HERMES_TEST_POSTGRES_DSN" in result.stdout
