"""``database.postgres`` in config.yaml (spec §2.2): validation order and wording, when it is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hermes_state.errors import ConfigError
from hermes_state.postgres import SessionDB
from hermes_state.postgres.config import (
    ConnectArgs,
    PostgresConfig,
    load_postgres_config,
    parse_postgres_config,
)

pytestmark = pytest.mark.backends("postgres")


def _write(home: Path, postgres: Any) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"database": {"postgres": postgres}}))


def test_defaults_when_absent(hermes_home: Path) -> None:
    assert load_postgres_config(hermes_home) == PostgresConfig()
    _write(hermes_home, None)
    config = load_postgres_config(hermes_home)
    assert (config.pool_size, config.max_overflow, config.pool_timeout, config.pool_recycle) == (5, 10, 30.0, -1.0)
    assert (config.pool_pre_ping, config.pool_use_lifo) == (True, False)
    assert config.connect_kwargs(read_only=False) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([1], "database.postgres must be a mapping"),
        ({"pool_szie": 3, "zeta": 1}, "database.postgres contains unsupported key\\(s\\): pool_szie, zeta"),
        ({"pool_size": True}, "database.postgres.pool_size must be an integer"),
        ({"pool_size": 2.0}, "pool_size must be an integer"),
        ({"pool_size": -1}, "pool_size must be >= 0"),
        ({"max_overflow": -2}, "max_overflow must be >= -1"),
        ({"pool_timeout": "5"}, "pool_timeout must be a number"),
        ({"pool_timeout": float("nan")}, "pool_timeout must be finite"),
        ({"pool_recycle": float("inf")}, "pool_recycle must be finite"),
        ({"pool_pre_ping": "yes"}, "pool_pre_ping must be a boolean"),
        ({"pool_use_lifo": 1}, "pool_use_lifo must be a boolean"),
        ({"connect_args": []}, "connect_args must be a mapping"),
        ({"connect_args": {"ssl": True}}, "connect_args contains unsupported key\\(s\\): ssl"),
        ({"connect_args": {"timeout": None}}, "connect_args.timeout must be a number"),
        ({"connect_args": {"command_timeout": 0}}, "connect_args.command_timeout must be > 0"),
        ({"connect_args": {"command_timeout": True}}, "connect_args.command_timeout must be a number"),
        ({"connect_args": {"statement_cache_size": 1.5}}, "statement_cache_size must be an integer"),
        ({"connect_args": {"server_settings": {"statement_timeout": 100}}}, "only string keys and values"),
        ({"connect_args": {"server_settings": {"default_transaction_read_only": "off"}}}, "controlled by read_only"),
        ({"connect_args": {"server_settings": "x"}}, "server_settings must be a mapping"),
    ],
)
def test_bad_values_name_the_key(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_postgres_config(raw)
    assert isinstance(caught.value, ValueError)


def test_errors_come_in_a_fixed_order() -> None:
    raw = {"pool_use_lifo": "x", "pool_timeout": -1, "max_overflow": "y", "pool_size": -3}
    for _ in range(5):
        with pytest.raises(ConfigError, match="pool_size must be >= 0"):
            parse_postgres_config(raw)


def test_accepted_values_keep_their_type_and_reach_connect_kwargs() -> None:
    config = parse_postgres_config(
        {
            "pool_size": 2, "max_overflow": 1, "pool_timeout": 4, "pool_recycle": 60, "pool_pre_ping": False,
            "pool_use_lifo": True,
            "connect_args": {
                "timeout": 11, "command_timeout": 7, "statement_cache_size": 0,
                "max_cached_statement_lifetime": 300.5, "max_cacheable_statement_size": 1024,
                "server_settings": {"application_name": "readonly-test"},
            },
        }
    )
    assert config.pool_timeout == 4 and isinstance(config.pool_timeout, int)
    assert config.connect_args == ConnectArgs(
        timeout=11, command_timeout=7, statement_cache_size=0, max_cached_statement_lifetime=300.5,
        max_cacheable_statement_size=1024, server_settings={"application_name": "readonly-test"},
    )
    assert config.connect_kwargs(read_only=True)["server_settings"] == {
        "application_name": "readonly-test", "default_transaction_read_only": "on",
    }
    assert config.connect_kwargs(read_only=False)["server_settings"] == {"application_name": "readonly-test"}


async def test_config_is_read_at_first_call_and_fixed_for_the_store(pg_dsn: str, hermes_home: Path) -> None:
    db = SessionDB(pg_dsn)
    _write(hermes_home, {"pool_size": 3, "connect_args": {"server_settings": {"application_name": "hermes-a"}}})
    try:
        await db.create_session("s", "cli")  # reads the file now, not at construction
        _write(hermes_home, {"pool_size": 8})
        await db.get_session("s")
        backend = db._backend  # type: ignore[attr-defined]
        assert backend.pg_config.pool_size == 3
        async with backend.pool.acquire() as conn:
            assert await conn.fetchval("SHOW application_name") == "hermes-a"
    finally:
        await db.close()


async def test_a_failed_config_is_not_kept(pg_dsn: str, hermes_home: Path) -> None:
    _write(hermes_home, {"pool_szie": 3})
    db = SessionDB(pg_dsn)
    try:
        with pytest.raises(ConfigError, match="pool_szie"):
            await db.get_session("s")
        assert db._backend.pool is None  # type: ignore[attr-defined]
        _write(hermes_home, {"pool_size": 3})
        assert await db.get_session("s") is None
        assert db._backend.pg_config.pool_size == 3  # type: ignore[attr-defined]
    finally:
        await db.close()


async def test_profile_is_captured_at_construction(pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile_a, profile_b = tmp_path / "a", tmp_path / "b"
    for home, size in ((profile_a, 2), (profile_b, 7)):
        home.mkdir()
        _write(home, {"pool_size": size})
    monkeypatch.setenv("HERMES_HOME", str(profile_a))
    db = SessionDB(pg_dsn)
    monkeypatch.setenv("HERMES_HOME", str(profile_b))
    try:
        await db.get_session("s")
        assert db._backend.pg_config.pool_size == 2  # type: ignore[attr-defined]
    finally:
        await db.close()


# ------------------------------------------- libpq/psycopg spellings (upstream 2026-08)


def test_psycopg_keys_map_onto_asyncpg() -> None:
    config = parse_postgres_config({"connect_args": {
        "connect_timeout": 7, "application_name": "worker-1", "prepare_threshold": None,
        "options": r"-c statement_timeout=60000 --lock-timeout=5000 -csearch_path=a\ b",
        "server_settings": {"work_mem": "8MB"},
    }})
    assert config.connect_args == ConnectArgs(
        timeout=7.0, statement_cache_size=0,
        server_settings={"work_mem": "8MB", "statement_timeout": "60000", "lock_timeout": "5000",
                         "search_path": "a b", "application_name": "worker-1"},
    )
    # A count keeps prepared statements on: asyncpg prepares on first use and caches (its default).
    assert parse_postgres_config({"connect_args": {"prepare_threshold": 5}}).connect_args == ConnectArgs()
    assert parse_postgres_config({"connect_args": {"prepare_threshold": 0}}).connect_args == ConnectArgs()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"connect_timeout": 0}, "connect_args.connect_timeout must be >= 1"),
        ({"connect_timeout": 2.5}, "connect_args.connect_timeout must be an integer"),
        ({"connect_timeout": "5"}, "connect_args.connect_timeout must be an integer"),
        ({"connect_timeout": True}, "connect_args.connect_timeout must be an integer"),
        ({"prepare_threshold": -1}, "connect_args.prepare_threshold must be >= 0"),
        ({"prepare_threshold": "off"}, "connect_args.prepare_threshold must be an integer"),
        ({"application_name": 5}, "connect_args.application_name must be a string"),
        ({"options": ["-c", "x=1"]}, "connect_args.options must be a string"),
        ({"options": "-B 100"}, "connect_args.options: '-B' is not a -c name=value or --name=value setting"),
        ({"options": "-c"}, "connect_args.options: -c needs a name=value"),
        ({"options": "-c statement_timeout"}, "connect_args.options: 'statement_timeout' is not name=value"),
        ({"options": "-c bad name=1"}, "connect_args.options: 'bad' is not name=value"),
        ({"options": "-c x=1\\"}, "unfinished backslash escape"),
        ({"options": "-c default_transaction_read_only=off"}, "sets default_transaction_read_only, which is controlled by read_only"),
        ({"autocommit": True}, "connect_args contains unsupported key\\(s\\): autocommit"),
        ({"row_factory": "dict_row", "cursor_factory": "x"}, "unsupported key\\(s\\): cursor_factory, row_factory"),
        ({"connect_timeout": 5, "timeout": 5}, "connect_timeout and database.postgres.connect_args.timeout set the same"),
        ({"prepare_threshold": None, "statement_cache_size": 10}, "prepare_threshold and .*statement_cache_size"),
        ({"application_name": "a", "server_settings": {"application_name": "b"}},
         "connect_args.application_name and .*server_settings.application_name"),
        ({"options": "-c lock_timeout=1", "server_settings": {"lock_timeout": "2"}},
         "connect_args.options and .*server_settings.lock_timeout"),
        ({"options": "-c application_name=a", "application_name": "b"}, "application_name is also set in"),
    ],
)
def test_bad_psycopg_keys_name_the_key(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_postgres_config({"connect_args": args})


def test_url_parameters_are_the_base_the_config_overrides() -> None:
    from hermes_state.postgres.dsn import asyncpg_dsn, url_connect_kwargs

    url = "postgresql+psycopg://u@h/db?sslmode=disable&connect_timeout=9&options=-c%20lock_timeout%3D3%20-c%20work_mem%3D4MB"
    assert asyncpg_dsn(url) == "postgresql://u@h/db?sslmode=disable"
    base = url_connect_kwargs(url)
    assert base == {"timeout": 9.0, "server_settings": {"lock_timeout": "3", "work_mem": "4MB"}}
    config = parse_postgres_config({"connect_args": {"connect_timeout": 2, "options": "-c lock_timeout=1"}})
    assert config.connect_kwargs(read_only=True, base=base) == {
        "timeout": 2.0,
        "server_settings": {"lock_timeout": "1", "work_mem": "4MB", "default_transaction_read_only": "on"},
    }
    assert asyncpg_dsn("postgresql+asyncpg://u@h/db?search_path=s") == "postgresql://u@h/db?search_path=s"


async def _show(conn: Any, *names: str) -> list[str]:
    return [await conn.fetchval(f"SHOW {name}") for name in names]


async def test_psycopg_url_and_keys_reach_every_connection(pg_dsn: str, hermes_home: Path) -> None:
    # Timeouts long enough not to fire: the schema step waits on an advisory lock every test's store shares.
    url = "postgresql+psycopg://" + pg_dsn.split("://", 1)[1] + "&connect_timeout=5&options=-c%20lock_timeout%3D54321"
    _write(hermes_home, {"connect_args": {
        "connect_timeout": 10, "application_name": "hermes-libpq", "prepare_threshold": None,
        "options": "-c statement_timeout=65432",
    }})
    db = SessionDB(url)
    try:
        await db.create_session("s", "cli")
        for i in range(3):
            await db.append_message("s", "user", f"turn {i}")
            assert len(await db.get_messages("s")) == i + 1
        backend = db._backend  # type: ignore[attr-defined]
        assert db.db_path.startswith("postgresql+psycopg://")
        expected = ["65432ms", "54321ms", "hermes-libpq", "off"]
        assert await _show(backend._writer_conn, "statement_timeout", "lock_timeout", "application_name",
                           "default_transaction_read_only") == expected
        async with backend.pool.acquire() as conn:
            assert await _show(conn, "statement_timeout", "lock_timeout", "application_name",
                               "default_transaction_read_only") == expected
            # prepare_threshold: null -> no named prepared statements on the connection.
            assert await conn.fetch("SELECT name FROM pg_prepared_statements") == []
    finally:
        await db.close()
    reader = SessionDB(url, read_only=True)
    try:
        assert [m["content"] for m in await reader.get_messages("s")] == ["turn 0", "turn 1", "turn 2"]
        async with reader._backend.pool.acquire() as conn:  # type: ignore[attr-defined]
            assert await _show(conn, "default_transaction_read_only", "statement_timeout") == ["on", "65432ms"]
    finally:
        await reader.close()


async def test_prepared_statements_stay_on_without_prepare_threshold_null(pg_dsn: str, hermes_home: Path) -> None:
    _write(hermes_home, {"connect_args": {"prepare_threshold": 5}})
    db = SessionDB("postgresql+psycopg://" + pg_dsn.split("://", 1)[1])
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "hi")
        for _ in range(3):
            await db.get_messages("s")
        async with db._backend.pool.acquire() as conn:  # type: ignore[attr-defined]
            assert await conn.fetch("SELECT name FROM pg_prepared_statements") != []
    finally:
        await db.close()
