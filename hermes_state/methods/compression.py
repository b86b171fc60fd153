"""Compression leases, in-place compaction, child sessions, lineage and resume."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["CompressionMethods"]


class CompressionMethods(StoreBase):
    """Compression leases, in-place compaction, child sessions, lineage and resume."""
