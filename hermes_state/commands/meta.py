"""Commands on the ``state_meta`` key/value table."""

from __future__ import annotations

from .base import Command


class SetMeta(Command, frozen=True):
    """Upsert one ``state_meta`` key."""

    key: str
    value: str | None
