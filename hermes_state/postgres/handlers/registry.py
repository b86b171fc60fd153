"""Command type -> async PostgreSQL handler table.

A handler is ``async def handler(conn, command) -> result``: ``conn`` is the
writer's asyncpg connection, inside the batch transaction and the command's
own savepoint, with the rows of every session the batch names already locked.
A bulk handler is ``async def bulk(conn, commands) -> list[(ok, value)]``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ...registry import HandlerRegistry

Handler = Callable[[Any, Any], Awaitable[Any]]
REGISTRY: HandlerRegistry[Handler] = HandlerRegistry("PostgreSQL")
HANDLERS = REGISTRY.handlers
BULK_HANDLERS = REGISTRY.bulk
handles = REGISTRY.handles
handles_bulk = REGISTRY.handles_bulk
handler_for = REGISTRY.handler_for
