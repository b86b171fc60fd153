"""asyncpg's client files (~/.pgpass, ~/.postgresql) are read off the event loop when a store connects.

BlockBuster (tests/conftest.py) is active: a stat or read of those files on
the loop fails the test. The test server has TLS off, so ``prefer`` (the
default) and ``allow`` must fall back to a plain connection as asyncpg does.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from hermes_state.postgres import SessionDB
from hermes_state.postgres.client_files import Connector

from .postgres_support import server_dsn


def _client_files(home: Path, password_line: str) -> None:
    """A home with a password file and an (unusable) client key, as asyncpg looks for them."""
    (home / ".postgresql").mkdir(parents=True)
    (home / ".postgresql" / "postgresql.key").write_text("not a key\n")
    (home / ".pgpass").write_text(password_line + "\n")
    os.chmod(home / ".pgpass", 0o600)


@pytest.mark.parametrize("sslmode", ["", "prefer", "allow", "disable"])
async def test_a_store_connects_without_reading_client_files_on_the_loop(
    sslmode: str, pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "user-home"
    await asyncio.to_thread(_client_files, home, "*:*:*:*:unused-with-trust-auth")
    monkeypatch.setenv("HOME", str(home))
    for name in ("PGPASSFILE", "PGPASSWORD", "PGSSLMODE", "PGSSLKEY", "PGSSLCERT"):
        monkeypatch.delenv(name, raising=False)
    dsn = pg_dsn + (("&" if "?" in pg_dsn else "?") + f"sslmode={sslmode}" if sslmode else "")
    db = SessionDB(dsn)
    try:
        await db.create_session("s", "cli")
        assert (await db.get_session("s") or {}).get("source") == "cli"
    finally:
        await db.close()


async def test_the_password_file_is_what_the_connection_offers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "user-home"
    await asyncio.to_thread(_client_files, home, "*:*:*:*:from-the-file")
    monkeypatch.setenv("HOME", str(home))
    for name in ("PGPASSFILE", "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    offered: list[Any] = []
    connector = Connector(server_dsn(), {"ssl": False})
    conn = await connector.connect()
    try:
        offered.append(conn._params.password)  # what asyncpg would send if the server asked
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    assert offered == ["from-the-file"]
