"""SQL for each write command, as synchronous functions on the writer thread.

A handler receives the raw DB-API connection (inside the batch transaction
and its own savepoint) and the command; what it returns resolves the caller's
future after COMMIT, what it raises fails that caller alone. Every module of
this package is imported here, so a new handler only needs ``@handles``.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import BULK_HANDLERS, HANDLERS, handler_for, handles, handles_bulk

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("registry", "common"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["BULK_HANDLERS", "HANDLERS", "handler_for", "handles", "handles_bulk"]
