"""Read queries, registered by name; each runs on a read connection's thread.

Every module of this package is imported here, so adding a query is adding a
decorated function to a module: nothing else to register.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import QUERIES, SEARCH_QUERIES, query, query_for, search_query

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["QUERIES", "SEARCH_QUERIES", "query", "query_for", "search_query"]
