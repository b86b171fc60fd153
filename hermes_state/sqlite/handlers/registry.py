"""Command type -> handler function table."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ...commands.base import Command

Handler = Callable[[Any, Any], Any]
# A bulk handler applies a run of same-type commands at once and returns one
# (ok, result-or-exception) outcome per command; raising means "apply them one by one".
BulkHandler = Callable[[Any, list[Any]], list[tuple[bool, Any]]]
HANDLERS: dict[type[Command], Handler] = {}
BULK_HANDLERS: dict[type[Command], BulkHandler] = {}
F = TypeVar("F", bound=Handler)
B = TypeVar("B", bound=BulkHandler)


def handles(command_type: type[Command]) -> Callable[[F], F]:
    """Register the decorated function as the SQLite handler of ``command_type``."""

    def register(fn: F) -> F:
        if command_type in HANDLERS:
            raise RuntimeError(f"two SQLite handlers for {command_type.__name__}")
        HANDLERS[command_type] = fn
        return fn

    return register


def handler_for(command: Command) -> Handler:
    """Return the handler for ``command``; a missing one is a programming error."""
    try:
        return HANDLERS[type(command)]
    except KeyError:
        raise NotImplementedError(f"no SQLite handler for {type(command).__name__}") from None


def handles_bulk(command_type: type[Command]) -> Callable[[B], B]:
    """Register an optional bulk path for consecutive ``command_type`` commands of one batch.

    The writer runs it inside a savepoint; if it raises, the savepoint is
    rolled back and the commands go through the ordinary handler one by one,
    so the bulk path only ever has to be right for the common, healthy case.
    """

    def register(fn: B) -> B:
        if command_type in BULK_HANDLERS:
            raise RuntimeError(f"two SQLite bulk handlers for {command_type.__name__}")
        BULK_HANDLERS[command_type] = fn
        return fn

    return register
