"""Query name -> synchronous read function table for the SQLite reader."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

QueryFn = Callable[..., Any]
QUERIES: dict[str, QueryFn] = {}
# Queries whose cost depends on the data (full-text search): the reader runs
# them on a bounded share of its connections, under the search deadline.
SEARCH_QUERIES: set[str] = set()
F = TypeVar("F", bound=QueryFn)


def query(fn: F) -> F:
    """Register ``fn`` under its own name as a read the facade can call."""
    if fn.__name__ in QUERIES:
        raise RuntimeError(f"two SQLite queries named {fn.__name__}")
    QUERIES[fn.__name__] = fn
    return fn


def search_query(fn: F) -> F:
    """Register ``fn`` like :func:`query` and mark it as a search (see ``SEARCH_QUERIES``)."""
    SEARCH_QUERIES.add(fn.__name__)
    return query(fn)


def query_for(name: str) -> QueryFn:
    try:
        return QUERIES[name]
    except KeyError:
        raise NotImplementedError(f"no SQLite query named {name!r}") from None
