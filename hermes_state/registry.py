"""Name tables a backend fills with its write handlers and read queries.

Each backend package owns one :class:`HandlerRegistry` (command type ->
handler, plus optional bulk handlers for runs of one type) and one
:class:`QueryRegistry` (query name -> function); its modules register with
the decorators, and its writer and reader look entries up here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .commands.base import Command

__all__ = ["HandlerRegistry", "QueryRegistry"]

H = TypeVar("H", bound=Callable[..., Any])
F = TypeVar("F", bound=Callable[..., Any])


class HandlerRegistry(Generic[H]):
    """Command type -> handler, and command type -> bulk handler, for one backend."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.handlers: dict[type[Command], H] = {}
        self.bulk: dict[type[Command], Callable[..., Any]] = {}

    def handles(self, command_type: type[Command]) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``command_type``."""

        def register(fn: F) -> F:
            if command_type in self.handlers:
                raise RuntimeError(f"two {self.backend} handlers for {command_type.__name__}")
            self.handlers[command_type] = fn  # type: ignore[assignment]
            return fn

        return register

    def handles_bulk(self, command_type: type[Command]) -> Callable[[F], F]:
        """Register a bulk path for consecutive ``command_type`` commands of one batch.

        It returns one (ok, result-or-exception) outcome per command; raising
        means "apply them one by one" (the writer rolls its savepoint back).
        """

        def register(fn: F) -> F:
            if command_type in self.bulk:
                raise RuntimeError(f"two {self.backend} bulk handlers for {command_type.__name__}")
            self.bulk[command_type] = fn
            return fn

        return register

    def handler_for(self, command: Command) -> H:
        """Return the handler for ``command``; raises NotImplementedError naming backend and command."""
        try:
            return self.handlers[type(command)]
        except KeyError:
            raise NotImplementedError(f"no {self.backend} handler for {type(command).__name__}") from None


class QueryRegistry:
    """Query name -> read function, for one backend."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.queries: dict[str, Callable[..., Any]] = {}

    def query(self, fn: F) -> F:
        """Register ``fn`` under its own name as a read the facade can call."""
        if fn.__name__ in self.queries:
            raise RuntimeError(f"two {self.backend} queries named {fn.__name__}")
        self.queries[fn.__name__] = fn
        return fn

    def query_for(self, name: str) -> Callable[..., Any]:
        """Return the query ``name``; raises NotImplementedError naming backend and query."""
        try:
            return self.queries[name]
        except KeyError:
            raise NotImplementedError(f"no {self.backend} query named {name!r}") from None
