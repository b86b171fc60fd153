"""The PostgreSQL backend: a writer connection for the actor, a pool for reads.

Nothing touches the network before the first awaited call: ``open()`` reads
``database.postgres`` from the profile captured at construction, creates the
(empty) read pool, and then either connects the writer and runs the schema
handshake (writable) or checks the schema on a pooled read-only connection.
A failed ``open()`` closes what it made, so the next call starts over (a
server that comes back, a fixed config file).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..backend import Outcome
from ..commands.base import Command
from ..config import StoreConfig, load_config
from ..errors import DatabaseUnavailableError, StoreClosedError, WriteNotAppliedError
from .config import PostgresConfig, load_postgres_config
from .dsn import asyncpg_dsn, endpoint, redact_dsn, url_connect_kwargs, url_store_options
from .errors import is_busy, is_disconnect, is_pooler_symptom, pooler_error, to_store_error, unavailable
from .lease_listener import LeaseReleaseListener
from .outcome import batch_committed
from .pool import ConnectionPool
from .pooler import for_transaction_pooler, url_server_settings, without_url_settings
from .queries import query_for
from .queries.registry import BEGIN_WITH
from .queries.health import search_index_facts
from .schema import check_schema_read_only, ensure_schema
from .text_values import nul_refusal
from .writer import BatchToken, apply_batch

__all__ = ["PostgresBackend", "PostgresReader", "load_driver"]

log = logging.getLogger("hermes_state.postgres")

READ_ONLY_MESSAGE = "read-only PostgreSQL SessionDB"
# What asyncpg's transaction(isolation="repeatable_read", readonly=True) sends.
_BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def load_driver() -> Any:
    """Import asyncpg, or raise ImportError naming the ``postgres`` extra."""
    try:
        import asyncpg  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            "the PostgreSQL SessionDB needs asyncpg: install the 'postgres' extra (pip install 'hermes-state[postgres]')"
        ) from exc
    return asyncpg


class PostgresReader:
    """Runs named read queries on pooled connections, each in one read-only snapshot."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend

    async def query(self, name: str, *args: Any) -> Any:
        """Run the registered query ``name`` with ``args``; returns what it returns."""
        pool = self._backend.pool
        if pool is None:
            raise StoreClosedError()
        fn = query_for(name)
        begin_with = BEGIN_WITH.get(name)
        try:
            return await self._run(pool, fn, args, begin_with)
        except Exception as exc:
            if not is_disconnect(exc):
                raise to_store_error(exc) from exc
        # The server dropped the connection (terminated, restarted): the pool
        # discarded it; a read has no effects, so retry once on a fresh one.
        try:
            return await self._run(pool, fn, args, begin_with)
        except Exception as exc:
            raise to_store_error(exc) from exc

    @staticmethod
    async def _run(pool: ConnectionPool, fn: Any, args: tuple[Any, ...], begin_with: str | None) -> Any:
        if begin_with is None:
            async with pool.acquire() as conn:
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    return await fn(conn, *args)
        # BEGIN and the query's own SET LOCAL in one round trip, which is also the pre-ping.
        async with pool.acquire(first=f"{_BEGIN_READ}; {begin_with}") as conn:
            try:
                result = await fn(conn, *args)
            except BaseException:
                # As asyncpg's transaction does: the ROLLBACK waits until a cancelled statement
                # has ended on the server (the pool then discards the connection).
                if not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")
            return result


class PostgresBackend:
    """Owns the connections to one PostgreSQL database (and schema, via ``search_path``)."""

    def __init__(self, dsn: str, *, read_only: bool, home: Path | None = None) -> None:
        self.dsn = dsn
        self.read_only = read_only
        self.home = home
        # ``config`` is the whole profile config (method groups read its ``sessions``
        # section, as on SQLite); ``pg_config`` is its ``database.postgres`` part.
        self.config = StoreConfig()
        self.pg_config = PostgresConfig()
        self.reader = PostgresReader(self)
        self.pool: ConnectionPool | None = None
        self._writer_conn: Any = None
        self._last_token: str | None = None  # deleted by the next batch's transaction
        self.reconnects = 0  # writer connections replaced after a loss (writer_stats)
        self._facts: dict[str, Any] = {}
        self._endpoint = endpoint(dsn)
        self._pooled = False  # behind a transaction pooler (``pooler``); read at open
        self._listen_url: str | None = None
        self._lease_listener = LeaseReleaseListener(self._connect_listener, self.lease_identity(), self._notify)

    def _direct_kwargs(self) -> dict[str, Any]:
        return self.pg_config.connect_kwargs(read_only=self.read_only, base=url_connect_kwargs(self.dsn))

    def _connect_kwargs(self) -> dict[str, Any]:
        if self._pooled:
            return for_transaction_pooler(self._direct_kwargs(), url_server_settings(asyncpg_dsn(self.dsn)))
        return self._direct_kwargs()

    def _server_dsn(self) -> str:
        dsn = asyncpg_dsn(self.dsn)
        return without_url_settings(dsn) if self._pooled else dsn

    async def _connect_writer(self) -> Any:
        asyncpg = load_driver()
        try:
            return await asyncpg.connect(self._server_dsn(), **self._connect_kwargs())
        except (OSError, TimeoutError) as exc:
            raise unavailable(self._endpoint, exc) from exc

    async def _connect_listener(self) -> Any:
        """The LISTEN connection: ``listen_url`` (direct, every setting at startup) when given, else the writer's kind."""
        if self._listen_url is None:
            return await self._connect_writer()
        kwargs = self._direct_kwargs()
        kwargs["server_settings"] = {**url_server_settings(asyncpg_dsn(self.dsn)), **(kwargs.get("server_settings") or {})}
        try:
            return await load_driver().connect(asyncpg_dsn(self._listen_url), **kwargs)
        except (OSError, TimeoutError) as exc:
            raise unavailable(endpoint(self._listen_url), exc) from exc

    async def _notify(self, channel: str) -> None:
        """Send a notification on ``channel`` from a connection of its own (the listener's check; the read
        pool's slots stay with the readers)."""
        conn = await self._connect_writer()
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_notify($1, 'probe')", channel)
        finally:
            await conn.close(timeout=5)

    async def open(self) -> None:
        load_driver()
        self.config = load_config(self.home)
        self.pg_config = load_postgres_config(self.home)
        options = url_store_options(self.dsn)
        self._pooled = options.get("pooler", self.pg_config.pooler) == "transaction"
        self._listen_url = options.get("listen_url", self.pg_config.listen_url)
        try:
            self.pool = ConnectionPool(self._server_dsn(), self.pg_config, self._connect_kwargs(), self._endpoint)
            await self.pool.open()
            if self.read_only:
                async with self.pool.acquire() as conn:
                    self._facts = await check_schema_read_only(conn)
                    await self._warn_if_pooled(conn)
            else:
                self._writer_conn = await self._connect_writer()
                self._facts = await ensure_schema(self._writer_conn)
                await self._warn_if_pooled(self._writer_conn)
        except BaseException as exc:
            await self.close()
            if is_pooler_symptom(exc):
                raise pooler_error(exc) from exc
            raise
        if self._pooled:  # LISTEN through a pooler hears nothing: find out (and warn) now, in the background
            self._lease_listener.start()

    async def _warn_if_pooled(self, conn: Any) -> None:
        """Log a warning when an undeclared pooler sits in between (the server pid is not the one connect announced)."""
        if self._pooled:
            return
        if await conn.fetchval("SELECT pg_backend_pid()") != conn.get_server_pid():
            log.warning(
                "PostgreSQL SessionDB at %s goes through a connection pooler (the server process differs from the "
                "one announced at connect); if it pools by transaction (PgBouncer pool_mode=transaction, hosted "
                "poolers), add pooler=transaction to the URL: see docs/postgres-operations.md", self._endpoint,
            )

    async def apply_batch(self, commands: Sequence[Command]) -> list[Outcome]:
        """Apply one batch; after a lost connection, find out whether it committed.

        Returns the outcomes when the batch committed (even if the COMMIT reply
        was lost); raises :class:`WriteNotAppliedError` when it provably did
        not (the actor then retries it once). Batches with a standalone
        command run several transactions and carry no token: a connection
        lost under them raises the driver's error.
        """
        if self.pool is None:
            raise StoreClosedError()
        standalone = any(c.standalone for c in commands)
        token = None if standalone else BatchToken(uuid.uuid4().hex, self._last_token)
        done: list[list[Outcome]] = []
        try:
            if self._writer_conn is None or self._writer_conn.is_closed():
                await self._replace_writer()
            outcomes = await apply_batch(self._writer_conn, commands, token, done)
        except Exception as exc:
            if not (is_disconnect(exc) or self._writer_conn is None or self._writer_conn.is_closed()):
                raise to_store_error(exc) from exc
            # The server ends the open transaction with the session; reconnect.
            await self._drop_writer()
            if token is None or isinstance(exc, WriteNotAppliedError):
                raise
            # ``done`` is filled just before COMMIT is sent: without it the server
            # never saw a COMMIT, so nothing committed; with it, ask the server.
            if done and await self._committed(token.token, exc):
                self._last_token = token.token
                return done[-1]
            raise WriteNotAppliedError(
                f"the connection to PostgreSQL at {self._endpoint} was lost before this write committed; "
                f"it was not applied ({type(exc).__name__}: {exc})"
            ) from exc
        if token is not None:
            self._last_token = token.token
        return outcomes

    async def _replace_writer(self) -> None:
        """Open a new writer connection in place of a lost one (``open()`` made the first)."""
        self._writer_conn = await self._connect_writer()
        self.reconnects += 1

    async def _committed(self, token: str, cause: BaseException) -> bool:
        """Ask a fresh writer connection whether ``token``'s batch committed (a few tries, then give up)."""
        last: BaseException = cause
        for pause in (0.0, 0.2, 1.0):
            await asyncio.sleep(pause)
            try:
                await self._replace_writer()
                return await batch_committed(self._writer_conn, token)
            except Exception as exc:
                if not is_disconnect(exc) and not isinstance(exc, ConnectionError):
                    raise
                last = exc
                await self._drop_writer()
        raise DatabaseUnavailableError(
            f"lost the connection to PostgreSQL at {self._endpoint} while committing a write and could not "
            f"reconnect to learn whether it committed; its outcome is unknown ({type(last).__name__}: {last})"
        ) from cause

    async def _drop_writer(self) -> None:
        conn, self._writer_conn = self._writer_conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    def is_busy_error(self, exc: BaseException) -> bool:
        return is_busy(exc)

    def lease_identity(self) -> str:
        """The database (and schema), as every store in this process on it names it for turn-lease wake-ups."""
        return redact_dsn(self.dsn)

    async def watch_lease_releases(self) -> bool:
        """Listen for turn-lease releases of other processes (once); returns whether notices arrive."""
        return await self._lease_listener.ensure()

    def command_refusal(self, command: Command) -> Exception | None:
        """The call-site error for text this backend cannot store (NUL outside message content), else None."""
        return nul_refusal(command)

    def readonly_error(self) -> Exception:
        return PermissionError(READ_ONLY_MESSAGE)

    def write_refusal(self) -> Exception | None:
        """PostgreSQL has no store-wide refusal (damaged pages are the server's business): always None."""
        return None

    async def storage_info(self) -> dict[str, Any]:
        asyncpg = load_driver()
        info: dict[str, Any] = {
            "backend": "postgres",
            "path": redact_dsn(self.dsn),
            "driver": f"asyncpg {asyncpg.__version__}",
            "schema_version": self._facts.get("schema_version"),
            "read_only": self.read_only,
            # How substring and CJK queries are served: the pg_trgm index, or ILIKE scans and why.
            "substring_index": self._facts.get("substring_index"),
        }
        if self.pool is not None:
            async with self.pool.acquire() as conn, conn.transaction(readonly=True):
                info["server_version"] = await conn.fetchval("SHOW server_version")
                info["schema"] = await conn.fetchval("SELECT current_schema()")
                info.update(await search_index_facts(conn))
        return info

    async def close(self) -> None:
        await self._lease_listener.close()
        pool, self.pool = self.pool, None
        writer, self._writer_conn = self._writer_conn, None
        if writer is not None:
            try:
                await writer.close(timeout=5)
            except Exception:
                writer.terminate()
        if pool is not None:
            await pool.close()
