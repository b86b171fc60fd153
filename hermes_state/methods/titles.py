"""Session titles and lineage-wide flags (archived, pinned, read)."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["TitleMethods"]


class TitleMethods(StoreBase):
    """Session titles and lineage-wide flags (archived, pinned, read)."""
