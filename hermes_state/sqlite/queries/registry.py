"""Query name -> synchronous read function table for the SQLite reader."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

QueryFn = Callable[..., Any]
QUERIES: dict[str, QueryFn] = {}
F = TypeVar("F", bound=QueryFn)


def query(fn: F) -> F:
    """Register ``fn`` under its own name as a read the facade can call."""
    if fn.__name__ in QUERIES:
        raise RuntimeError(f"two SQLite queries named {fn.__name__}")
    QUERIES[fn.__name__] = fn
    return fn


def query_for(name: str) -> QueryFn:
    try:
        return QUERIES[name]
    except KeyError:
        raise NotImplementedError(f"no SQLite query named {name!r}") from None
