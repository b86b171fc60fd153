"""SQL for each write command, as synchronous functions on the writer thread.

A handler receives the raw DB-API connection (inside the batch transaction
and its own savepoint) and the command; what it returns resolves the caller's
future after COMMIT, what it raises fails that caller alone.
"""

from __future__ import annotations

from . import messages, meta, sessions, usage  # noqa: F401  (registration side effect)
from .registry import HANDLERS, handler_for

__all__ = ["HANDLERS", "handler_for"]
