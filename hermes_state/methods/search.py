"""Message and session search, FTS index upkeep (issue: search)."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["SearchMethods"]


class SearchMethods(StoreBase):
    """Message and session search, FTS index upkeep (issue: search)."""
