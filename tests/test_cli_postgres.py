"""The command against the real PostgreSQL server (a fresh schema per test).

``copy`` to and from PostgreSQL needs the backend's ``search_sessions_rows``
query and ``ImportSessions`` handler, which it does not have yet; copy is
tested SQLite to SQLite in test_cli_copy until then.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from hermes_state.postgres import SessionDB as PostgresSessionDB

from .cli_support import one_error_line, run_cli, run_json


@pytest.fixture
async def pg_url(pg_dsn: str) -> AsyncIterator[str]:
    """The test's schema as an operator types it: ``postgresql://`` (the command accepts both forms)."""
    yield "postgresql://" + pg_dsn.split("://", 1)[1]


async def test_info_on_postgres(tmp_path: Path, pg_dsn: str, pg_url: str) -> None:
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("pg-1", source="cli")
        await db.append_message("pg-1", "user", "hello from postgres")
        await db.append_message("pg-1", "assistant", "hello back")
    finally:
        await db.close()
    info = run_json(tmp_path, "--db", pg_url, "info")
    assert info["backend"] == "postgres" and info["messages"] == 2
    assert info["schema_version"] == 25 and info["server_version"]
    human = run_cli(tmp_path, "--db", pg_url, "info")
    assert human.returncode == 0 and "backend postgres" in human.stdout and "server_version" in human.stdout


def test_a_postgres_server_that_is_down(tmp_path: Path) -> None:
    secret = "pw-never-shown"
    url = f"postgresql://hermes:{secret}@127.0.0.1:1/state"
    for args in (["--db", url, "info"], ["--db", str(tmp_path / "x.db"), "copy", "--from", url]):
        done = run_cli(tmp_path, *args)
        assert done.returncode == 1
        line = one_error_line(done)
        assert "cannot connect to PostgreSQL at 127.0.0.1:1" in line
        assert secret not in done.stdout + done.stderr
