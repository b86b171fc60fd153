"""Query name -> async PostgreSQL read function table.

A query is ``async def name(conn, *args) -> result``: ``conn`` is a pooled
asyncpg connection inside a read-only REPEATABLE READ transaction (one
snapshot for every statement of the query). Names, arguments and result
shapes are those of ``hermes_state.sqlite.queries``. A query registered with
:func:`query_begun_with` has SQL of its own (``SET LOCAL ...``) sent with that
transaction's ``BEGIN``, in the same round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ...registry import QueryRegistry

__all__ = ["BEGIN_WITH", "QUERIES", "REGISTRY", "query", "query_begun_with", "query_for"]

F = TypeVar("F", bound=Callable[..., Any])

REGISTRY = QueryRegistry("PostgreSQL")
QUERIES = REGISTRY.queries
query = REGISTRY.query
query_for = REGISTRY.query_for
# Query name -> SQL the reader sends after the query's BEGIN, in the same simple-protocol message.
BEGIN_WITH: dict[str, str] = {}


def query_begun_with(sql: str) -> Callable[[F], F]:
    """Register the decorated query, its read transaction begun together with ``sql``."""

    def register(fn: F) -> F:
        BEGIN_WITH[fn.__name__] = sql
        return query(fn)

    return register
