"""Query name -> async PostgreSQL read function table.

A query is ``async def name(conn, *args) -> result``: ``conn`` is a pooled
asyncpg connection inside a read-only REPEATABLE READ transaction (one
snapshot for every statement of the query). Names, arguments and result
shapes are those of ``hermes_state.sqlite.queries``.
"""

from __future__ import annotations

from ...registry import QueryRegistry

REGISTRY = QueryRegistry("PostgreSQL")
QUERIES = REGISTRY.queries
query = REGISTRY.query
query_for = REGISTRY.query_for
