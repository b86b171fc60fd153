"""Read queries, registered by name; each runs on a pooled connection.

Every module of this package is imported here, so adding a query is adding a
decorated function to a module: nothing else to register.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import QUERIES, query, query_for

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["QUERIES", "query", "query_for"]
