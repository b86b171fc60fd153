"""SQL for each write command, as synchronous functions on the writer thread.

A handler receives the raw DB-API connection (inside the batch transaction
and its own savepoint) and the command; what it returns resolves the caller's
future after COMMIT, what it raises fails that caller alone. Every module in
``MODULES`` is imported here, so a new handler only needs ``@handles`` (a new
module joins ``MODULES``).
"""

from __future__ import annotations

from ...module_lists import import_modules
from .registry import BULK_HANDLERS, HANDLERS, handler_for, handles, handles_bulk

# Listed, not discovered (see module_lists).
MODULES = (
    "compression", "health", "listing", "maintenance", "message_rows", "messages", "meta", "rows", "search",
    "sessions", "titles", "turn_leases", "usage",
)
import_modules(__name__, MODULES)

__all__ = ["BULK_HANDLERS", "HANDLERS", "handler_for", "handles", "handles_bulk"]
