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
