"""Coalesced token accounting (queue_token_counts / flush_token_counts)."""

from __future__ import annotations

from ..facade import StoreBase

__all__ = ["UsageMethods"]


class UsageMethods(StoreBase):
    """Coalesced token accounting (queue_token_counts / flush_token_counts)."""
