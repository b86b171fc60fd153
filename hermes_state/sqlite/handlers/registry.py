"""Command type -> handler function table."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from ...commands.base import Command

Handler = Callable[[Any, Any], Any]
HANDLERS: dict[type[Command], Handler] = {}
F = TypeVar("F", bound=Handler)


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
