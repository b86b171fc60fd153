"""Deletion, pruning, archiving, export/import and storage maintenance."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["MaintenanceMethods"]


class MaintenanceMethods(StoreBase):
    """Deletion, pruning, archiving, export/import and storage maintenance."""
