"""The common base of every write command."""

from __future__ import annotations

import msgspec


class Command(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """A write the actor applies inside a group-commit transaction.

    ``tag=True`` makes each subclass encode with its class name, so a stream
    of mixed commands round-trips through ``msgspec`` unambiguously.
    """
