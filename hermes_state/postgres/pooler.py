"""Behind a transaction pooler (PgBouncer ``pool_mode = transaction``, hosted poolers that default to it).

Such a pooler hands each transaction (and each statement outside one) to
whichever server connection is free, so nothing that lives in a server
session survives from one transaction to the next. ``pooler=transaction``
(URL) or ``database.postgres.pooler: transaction`` (config.yaml) makes
every connection of the store fit that:

* no named server-side prepared statements: asyncpg's statement cache is
  off (``statement_cache_size=0``), so each statement is parsed again in the
  same round trip that binds and runs it (unnamed statements);
* server settings (the URL's query parameters such as ``search_path``,
  ``options``, ``connect_args.server_settings``, and ``read_only``'s
  read-only mode) are not startup parameters, which poolers refuse
  (PgBouncer: ``unsupported startup parameter``): they are applied with
  ``set_config(..., true)`` in the same simple query as every ``BEGIN``, so
  they hold for exactly that transaction on whichever server runs it. Only
  the parameters PgBouncer tracks per client (``application_name``,
  ``client_encoding``, ``DateStyle``, ``TimeZone``,
  ``standard_conforming_strings``) stay startup parameters.

Everything the store runs that depends on a setting runs in a transaction
(the store's tables are found through ``search_path``).
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .libpq import READ_ONLY_SETTING

__all__ = ["POOLER_MODES", "begin_settings_sql", "for_transaction_pooler", "url_server_settings", "without_url_settings"]

POOLER_MODES = ("none", "transaction")
# Startup parameters PgBouncer keeps per client and replays on each server connection it lends.
_TRACKED = frozenset({"application_name", "client_encoding", "datestyle", "timezone", "standard_conforming_strings"})
# Query parameters asyncpg reads itself; every other one it sends as a server setting.
_ASYNCPG_PARAMETERS = frozenset({
    "host", "port", "dbname", "database", "user", "password", "passfile", "sslmode", "sslcert", "sslkey",
    "sslrootcert", "sslnegotiation", "sslcrl", "sslpassword", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "target_session_attrs", "krbsrvname", "gsslib", "service",
})


def url_server_settings(url: str) -> dict[str, str]:
    """The query parameters of an asyncpg ``postgresql://`` URL that asyncpg would send as server settings."""
    return {k: v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k not in _ASYNCPG_PARAMETERS}


def without_url_settings(url: str) -> str:
    """``url`` with only the query parameters asyncpg reads itself (its settings travel per transaction)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in _ASYNCPG_PARAMETERS]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def begin_settings_sql(settings: dict[str, str]) -> str:
    """One ``SELECT set_config(name, value, true), ...`` (transaction-local; values parsed as at startup)."""
    calls = ", ".join(f"set_config({_literal(name)}, {_literal(value)}, true)" for name, value in settings.items())
    return f"SELECT {calls}" if calls else ""


@functools.lru_cache(maxsize=32)
def _connection_class(begin_sql: str) -> type:
    import asyncpg  # type: ignore[import-untyped]

    class PooledConnection(asyncpg.Connection):  # type: ignore[misc]
        """Sends the store's settings with every ``BEGIN`` (same message, no extra round trip)."""

        async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
            if not args and query.startswith("BEGIN"):
                query = f"{query.rstrip().rstrip(';')}; {begin_sql}"
            return await super().execute(query, *args, timeout=timeout)  # type: ignore[no-any-return]

    return PooledConnection


def for_transaction_pooler(kwargs: dict[str, Any], url_settings: dict[str, str]) -> dict[str, Any]:
    """``asyncpg.connect`` arguments for a transaction pooler, from the direct ones.

    ``kwargs`` are the direct connection's (their ``server_settings`` win
    over ``url_settings``, as asyncpg merges them); the result has no
    statement cache, only tracked startup parameters, and a connection class
    that applies the rest at each ``BEGIN`` (``default_transaction_read_only``
    becomes the transaction's own read-only mode).
    """
    settings = {**url_settings, **(kwargs.get("server_settings") or {})}
    startup = {k: v for k, v in settings.items() if k.lower() in _TRACKED}
    local = {k: v for k, v in settings.items() if k.lower() not in _TRACKED}
    if local.pop(READ_ONLY_SETTING, "off") == "on":
        local["transaction_read_only"] = "on"
    pooled = {k: v for k, v in kwargs.items() if k != "server_settings"}
    pooled["statement_cache_size"] = 0
    if startup:
        pooled["server_settings"] = startup
    if local:
        pooled["connection_class"] = _connection_class(begin_settings_sql(local))
    return pooled
