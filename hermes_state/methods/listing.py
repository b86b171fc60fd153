"""Listing, counting and reading helpers for hosts and their CLIs."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["ListingMethods"]


class ListingMethods(StoreBase):
    """Listing, counting and reading helpers for hosts and their CLIs."""
