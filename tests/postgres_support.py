"""Test helpers for the PostgreSQL backend: the server from the environment, one schema per test.

``HERMES_TEST_POSTGRES_DSN`` (a ``postgresql://`` URL, e.g.
``postgresql://postgres@127.0.0.1:5432/test``) points the tests at a server.
Without it PostgreSQL tests skip, unless ``HERMES_REQUIRE_POSTGRES=1`` (CI),
which makes them fail instead. Each test gets its own schema, named with a
uuid and dropped afterwards; the store reaches it through ``search_path``
in the DSN's query string.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

ENV_DSN = "HERMES_TEST_POSTGRES_DSN"
ENV_REQUIRE = "HERMES_REQUIRE_POSTGRES"
HOW_TO = (
    f"PostgreSQL tests need a server: set {ENV_DSN}=postgresql://user@host:5432/db "
    f"(trust or password auth; the tests create and drop their own schemas)"
)


def server_dsn() -> str:
    """The admin DSN (``postgresql://``) from the environment; skips (or fails under CI) without one."""
    dsn = os.environ.get(ENV_DSN, "").strip()
    if not dsn:
        if os.environ.get(ENV_REQUIRE) == "1":
            pytest.fail(f"{ENV_REQUIRE}=1 but {ENV_DSN} is not set. {HOW_TO}")
        pytest.skip(HOW_TO)
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if dsn.startswith(prefix):
            dsn = "postgresql://" + dsn[len(prefix):]
    return dsn


def store_dsn(admin_dsn: str, schema: str | None = None) -> str:
    """The ``postgresql+asyncpg://`` URL the store wants, optionally pinned to ``schema``."""
    parts = urlsplit(admin_dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "search_path"]
    if schema is not None:
        query.append(("search_path", schema))
    url = urlunsplit(parts._replace(query=urlencode(query)))
    return "postgresql+asyncpg://" + url[len("postgresql://"):]


async def admin_connect(admin_dsn: str):  # type: ignore[no-untyped-def]
    """A raw asyncpg connection for setup and inspection; fails the test (or skips) if the server is down."""
    import asyncpg

    try:
        return await asyncpg.connect(admin_dsn, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get(ENV_REQUIRE) == "1":
            pytest.fail(f"PostgreSQL at {ENV_DSN} is unreachable: {exc}")
        pytest.skip(f"PostgreSQL at {ENV_DSN} is unreachable ({exc}). {HOW_TO}")


async def temporary_schema(admin_dsn: str) -> AsyncIterator[str]:
    """Create a uniquely named empty schema, yield its name, drop it (CASCADE) afterwards."""
    name = f"hs_test_{uuid.uuid4().hex}"
    conn = await admin_connect(admin_dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{name}"')
        yield name
    finally:
        try:
            # Sessions still open in the schema would block the drop; end them first.
            await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()


async def temporary_database(admin_dsn: str) -> AsyncIterator[str]:
    """Create a uniquely named empty database, yield its ``postgresql://`` URL, drop it afterwards.

    For tests whose outcome depends on every session of the database (what
    VACUUM may remove is bounded by the oldest snapshot in the database, and
    other runs share the server's ``test`` database).
    """
    name = f"hs_test_{uuid.uuid4().hex}"
    conn = await admin_connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(admin_dsn)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


async def schema_connect(pg_dsn: str):  # type: ignore[no-untyped-def]
    """A raw asyncpg connection on the schema a ``pg_dsn`` store URL pins through ``search_path``."""
    schema = pg_dsn.rsplit("search_path=", 1)[1]
    conn = await admin_connect("postgresql://" + pg_dsn[len("postgresql+asyncpg://"):].split("?", 1)[0])
    await conn.execute(f'SET search_path TO "{schema}"')
    return conn
