"""SQL for each write command, as async functions on the writer's connection.

Every module in ``MODULES`` is imported here, so a new handler only needs
``@handles`` (see ``registry``; a new module joins ``MODULES``). Shared SQL helpers live in ``common``.
"""

from __future__ import annotations

from ...module_lists import import_modules
from .registry import BULK_HANDLERS, HANDLERS, handler_for, handles, handles_bulk

# Listed, not discovered (see module_lists).
MODULES = (
    "compression", "guarded_append", "health", "listing", "maintenance", "messages", "meta", "rows", "search",
    "sessions", "titles", "turn_leases", "usage",
)
import_modules(__name__, MODULES)

__all__ = ["BULK_HANDLERS", "HANDLERS", "handler_for", "handles", "handles_bulk"]
