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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..backend import Outcome
from ..commands.base import Command
from ..config import StoreConfig, load_config
from ..errors import DatabaseUnavailableError, StoreClosedError, WriteNotAppliedError
from ..off_loop import off_loop
from .client_files import Connector
from .config import PostgresConfig, load_postgres_config
from .core_boundary import CoreBoundary
from .dsn import asyncpg_dsn, commit_outcome_timeout, endpoint, redact_dsn, url_connect_kwargs, url_store_options
from .errors import is_busy, is_disconnect, is_pooler_symptom, pooler_error, to_store_error
from .failover import DEFAULT_COMMIT_OUTCOME_TIMEOUT, connect_at, is_read_only_error, no_writable_server, writable_target
from .hosts import peer
from .lease_listener import LeaseReleaseListener
from .migration import check_schema_read_only, ensure_schema
from .outcome import batch_committed
from .pool import ConnectionPool, PoolTimeoutError, drop_connection
from .pooler import for_transaction_pooler, url_server_settings, without_url_settings
from .queries import query_for
from .queries.health import search_index_facts
from .queries.registry import BEGIN_WITH
from .replicas import Replica, ReplicaSet
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
        replicas = self._backend.replicas
        if replicas is not None:
            replica = await replicas.choose(name)
            if replica is not None:
                try:
                    result = await self._run(replica.pool, fn, args, begin_with)
                except Exception as exc:
                    # Unreachable, or a query cancelled by a recovery conflict (40001): the primary answers.
                    if not (is_disconnect(exc) or is_busy(exc)):
                        raise to_store_error(exc) from exc
                    if is_disconnect(exc) and not isinstance(exc, PoolTimeoutError):
                        replicas.failed(replica, exc)
                else:
                    replica.reads += 1
                    replicas.counts["replica"] += 1
                    return result
            replicas.counts["primary"] += 1
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
            if is_disconnect(exc) and not isinstance(exc, (DatabaseUnavailableError, TimeoutError)):
                raise DatabaseUnavailableError(
                    f"lost the connection to PostgreSQL at {self._backend.endpoint} twice during a read "
                    f"({type(exc).__name__}: {exc})"
                ) from exc
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


def _load_configs(home: Path | None) -> tuple[StoreConfig, PostgresConfig]:
    """The profile's store config and its ``database.postgres`` part (reads config.yaml)."""
    return load_config(home), load_postgres_config(home)


class PostgresBackend:
    """Owns the connections to one PostgreSQL database (and schema, via ``search_path``)."""

    def __init__(
        self,
        dsn: str,
        *,
        read_only: bool,
        home: Path | None = None,
        read_replicas: Sequence[str] = (),
        store_options: Mapping[str, str] | None = None,
    ) -> None:
        self.dsn = dsn
        self.store_options = dict(store_options or {})  # the constructor's pooler / listen_url: win over the URL's
        self.replica_dsns = tuple(read_replicas)  # the constructor's; config.yaml's when empty
        self.replicas: ReplicaSet | None = None
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
        self.endpoint = endpoint(dsn)  # the URL's host list, for errors before a connection exists
        self._writer_at = self.endpoint  # the host the writer connection talks to
        self._shared_connector: Connector | None = None
        self._pooled = False  # behind a transaction pooler (``pooler``); read at open
        self._listen_url: str | None = None
        self._lease_listener = LeaseReleaseListener(self._connect_listener, self.lease_identity(), self._notify)
        self._core: CoreBoundary | None = None

    def core(self) -> CoreBoundary:
        """The SQLAlchemy Core boundary for host SQL (``SessionDB._read`` / ``_write``), made on first use."""
        if self._core is None:
            self._core = CoreBoundary(self._connect_writer, self.pg_config)
        return self._core

    def _direct_kwargs(self) -> dict[str, Any]:
        kwargs = self.pg_config.connect_kwargs(read_only=self.read_only, base=url_connect_kwargs(self.dsn))
        # A writable store reads its own writes from the primary too, so both connect to a writable host.
        return kwargs if self.read_only else {**kwargs, **writable_target(self.dsn)}

    def _shaped_connector(self, dsn: str, kwargs: dict[str, Any]) -> Connector:
        """A connector to ``dsn``; behind a transaction pooler the URL's settings travel per transaction."""
        server = asyncpg_dsn(dsn)
        if self._pooled:
            return Connector(without_url_settings(server), for_transaction_pooler(kwargs, url_server_settings(server)))
        return Connector(server, kwargs)

    def commit_outcome_timeout(self) -> float:
        """Seconds to keep reconnecting to resolve a lost COMMIT reply: config.yaml, else the URL, else 30."""
        configured = self.pg_config.commit_outcome_timeout
        if configured is None:
            configured = commit_outcome_timeout(self.dsn)
        return DEFAULT_COMMIT_OUTCOME_TIMEOUT if configured is None else configured

    def _connector(self) -> Connector:
        """The connector every connection of this store opens through (one, so it learns the server's TLS answer)."""
        if self._shared_connector is None:
            self._shared_connector = self._shaped_connector(self.dsn, self._direct_kwargs())
        return self._shared_connector

    async def _connect_writer(self) -> Any:
        load_driver()
        conn = await connect_at(self._connector(), self.endpoint)
        if self.read_only:
            return conn
        where = peer(conn, self.endpoint)
        try:
            # The URL may choose target_session_attrs=any: a standby must still not become the writer.
            read_only = await conn.fetchval("SHOW transaction_read_only") == "on"
        except BaseException:
            conn.terminate()
            raise
        if read_only:
            conn.terminate()
            raise no_writable_server(where)
        self._writer_at = where
        return conn

    async def _connect_listener(self) -> Any:
        """The LISTEN connection: ``listen_url`` (direct, every setting at startup) when given, else the writer's kind."""
        if self._listen_url is None:
            return await self._connect_writer()
        kwargs = self._direct_kwargs()
        kwargs["server_settings"] = {**url_server_settings(asyncpg_dsn(self.dsn)), **(kwargs.get("server_settings") or {})}
        return await connect_at(Connector(asyncpg_dsn(self._listen_url), kwargs), endpoint(self._listen_url))

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
        # config.yaml is read on a worker thread, never on the loop.
        self.config, self.pg_config = await off_loop(_load_configs, self.home)
        options = {**url_store_options(self.dsn), **self.store_options}
        self._pooled = options.get("pooler", self.pg_config.pooler) == "transaction"
        self._listen_url = options.get("listen_url", self.pg_config.listen_url)
        try:
            self._shared_connector = None  # the config was just (re)read
            self.pool = ConnectionPool(self._connector(), self.pg_config, self.endpoint)
            await self.pool.open()
            await self._open_replicas()
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

    async def rebind(self, dead: bool) -> None:
        """Serve the event loop the store moved to: asyncpg connections belong to the loop that
        opened them, so the pool, the writer and the listener start afresh on this one. Returns None.

        ``dead`` (the old loop closed) needs nothing more: a transaction it left
        open ends with its connection's session.
        """
        if self.pool is None:
            return
        self.pool.discard()
        writer, self._writer_conn = self._writer_conn, None
        drop_connection(writer)
        self._lease_listener.discard()
        self.pool = ConnectionPool(self._connector(), self.pg_config, self.endpoint)
        await self.pool.open()
        for replica in self.replicas.replicas if self.replicas is not None else ():
            replica.pool.discard()
            replica.pool = self._replica_pool(replica.dsn)
            await replica.pool.open()
        if not self.read_only:
            self._writer_conn = await self._connect_writer()

    async def _warn_if_pooled(self, conn: Any) -> None:
        """Log a warning when an undeclared pooler sits in between (the server pid is not the one connect announced)."""
        if self._pooled:
            return
        if await conn.fetchval("SELECT pg_backend_pid()") != conn.get_server_pid():
            log.warning(
                "PostgreSQL SessionDB at %s goes through a connection pooler (the server process differs from the "
                "one announced at connect); if it pools by transaction (PgBouncer pool_mode=transaction, hosted "
                "poolers), add pooler=transaction to the URL: see docs/postgres-operations.md", self.endpoint,
            )

    async def _open_replicas(self) -> None:
        dsns = self.replica_dsns or self.pg_config.read_replicas
        if not dsns:
            return
        replicas = [Replica(dsn, self._replica_pool(dsn)) for dsn in dsns]
        self.replicas = ReplicaSet(replicas, max_lag=self.pg_config.replica_max_lag, wait=self.pg_config.replica_wait)
        await self.replicas.open()

    def _replica_pool(self, dsn: str) -> ConnectionPool:
        """A read pool on replica ``dsn``: read-only connections, any host it lists, this store's pool options."""
        kwargs = self.pg_config.connect_kwargs(read_only=True, base=url_connect_kwargs(dsn))
        return ConnectionPool(self._shaped_connector(dsn, kwargs), self.pg_config, endpoint(dsn))

    def read_routing(self) -> dict[str, Any] | None:
        """How reads were routed and each replica's last known lag (None without replicas; no I/O)."""
        return self.replicas.stats() if self.replicas is not None else None

    async def _note_write(self) -> None:
        """With replicas: record the primary's WAL position after a committed batch (read-your-writes)."""
        if self.replicas is None:
            return
        try:
            self.replicas.wrote(await self._writer_conn.fetchval("SELECT pg_current_wal_lsn()::text"))
        except Exception:
            self.replicas.wrote(None)  # unknown: reads go to the primary until the next write's position

    async def apply_batch(self, commands: Sequence[Command]) -> list[Outcome]:
        """Apply one batch; after a lost connection, find out whether it committed.

        Returns the outcomes when the batch committed (even if the COMMIT reply
        was lost); raises :class:`WriteNotAppliedError` when it provably did
        not (the actor then retries it once). Batches with a standalone
        command run several transactions and carry no token: a connection
        lost under them raises :class:`DatabaseUnavailableError`. Every error
        names the host the writer was talking to (or the URL's host list).
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
            where = self._writer_at
            if is_read_only_error(exc):
                # The server turned read-only (demoted or fenced primary): the statement failed, so
                # nothing of the batch committed; the next connection looks for a writable host.
                await self._drop_writer()
                said = (
                    f"PostgreSQL at {where} refused a write because it is read-only now (a standby after a "
                    f"failover, or set read-only); the next write reconnects to a writable host at {self.endpoint}"
                )
                if token is None:
                    raise DatabaseUnavailableError(f"{said} ({exc})") from exc
                raise WriteNotAppliedError(f"{said}; this write was not applied ({exc})") from exc
            if not (is_disconnect(exc) or self._writer_conn is None or self._writer_conn.is_closed()):
                raise to_store_error(exc) from exc
            # The server ends the open transaction with the session; reconnect.
            await self._drop_writer()
            if isinstance(exc, WriteNotAppliedError) or (token is None and isinstance(exc, DatabaseUnavailableError)):
                raise
            if token is None:
                raise DatabaseUnavailableError(
                    f"lost the connection to PostgreSQL at {where} during a write of several transactions; "
                    f"the ones before the loss committed ({type(exc).__name__}: {exc})"
                ) from exc
            # ``done`` is filled just before COMMIT is sent: without it the server
            # never saw a COMMIT, so nothing committed; with it, ask the server.
            if done and await self._committed(token.token, exc):
                self._last_token = token.token
                await self._note_write()
                return done[-1]
            raise WriteNotAppliedError(
                f"the connection to PostgreSQL at {where} was lost before this write committed; "
                f"it was not applied ({type(exc).__name__}: {exc})"
            ) from exc
        if token is not None:
            self._last_token = token.token
        await self._note_write()
        return outcomes

    async def _replace_writer(self) -> None:
        """Open a new writer connection in place of a lost one (``open()`` made the first)."""
        self._writer_conn = await self._connect_writer()
        self.reconnects += 1

    async def _committed(self, token: str, cause: BaseException) -> bool:
        """Ask a fresh writer connection whether ``token``'s batch committed.

        Keeps reconnecting (to whichever listed host is writable: after a failover, the promoted
        standby) for :meth:`commit_outcome_timeout` seconds, then gives up with the outcome unknown.
        """
        window = self.commit_outcome_timeout()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window
        last: BaseException = cause
        pause = 0.0
        while (remaining := deadline - loop.time()) > 0:
            await asyncio.sleep(min(pause, remaining))
            try:
                return await asyncio.wait_for(self._ask_committed(token), max(deadline - loop.time(), 0.001))
            except Exception as exc:
                lost = isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError))
                if not (lost or is_disconnect(exc) or is_read_only_error(exc)):
                    raise
                last = exc
                await self._drop_writer()
            pause = min(pause * 2 or 0.1, 1.0)
        raise DatabaseUnavailableError(
            f"lost the connection to PostgreSQL at {self._writer_at} while committing a write and found no "
            f"writable server at {self.endpoint} within {window:g} s (commit_outcome_timeout) to learn whether "
            f"it committed; its outcome is unknown ({type(last).__name__}: {last})"
        ) from cause

    async def _ask_committed(self, token: str) -> bool:
        await self._replace_writer()
        return await batch_committed(self._writer_conn, token)

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

    def lease_releases_watched(self) -> bool:
        """Whether the listener for turn-lease releases is up now (no I/O)."""
        return self._lease_listener.listening

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
        core, self._core = self._core, None
        if core is not None:
            await core.close()
        await self._lease_listener.close()
        pool, self.pool = self.pool, None
        replicas, self.replicas = self.replicas, None
        if replicas is not None:
            await replicas.close()
        writer, self._writer_conn = self._writer_conn, None
        if writer is not None:
            try:
                await writer.close(timeout=5)
            except Exception:
                writer.terminate()
        if pool is not None:
            await pool.close()
