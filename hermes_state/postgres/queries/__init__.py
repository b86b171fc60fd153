"""Read queries, registered by name; each runs on a pooled connection.

Every module in ``MODULES`` is imported here, so adding a query is adding a
decorated function to one of them (a new module joins ``MODULES``).
"""

from __future__ import annotations

from ...module_lists import import_modules
from .registry import QUERIES, query, query_for

# Listed, not discovered (see module_lists).
MODULES = (
    "compression", "core", "health", "listing", "maintenance", "page_check", "rows", "search", "search_form",
    "session_lookup", "titles", "turn_leases", "usage",
)
import_modules(__name__, MODULES)

__all__ = ["QUERIES", "query", "query_for"]
