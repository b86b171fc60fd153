"""SQL for each write command, as async functions on the writer's connection.

Every module of this package is imported here, so a new handler only needs
``@handles`` (see ``registry``). Shared SQL helpers live in ``common``.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import BULK_HANDLERS, HANDLERS, handler_for, handles, handles_bulk

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("registry", "common"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["BULK_HANDLERS", "HANDLERS", "handler_for", "handles", "handles_bulk"]
