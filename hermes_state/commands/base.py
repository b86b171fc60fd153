"""The common base of every write command."""

from __future__ import annotations

from typing import ClassVar

import msgspec


class Command(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """A write the actor applies inside a group-commit transaction.

    ``tag=True`` makes each subclass encode with its class name, so a stream
    of mixed commands round-trips through ``msgspec`` unambiguously.

    A subclass that sets ``standalone = True`` (VACUUM, checkpoints, bulk
    maintenance that manages its own transactions) runs on the writer between
    group-commit transactions, never inside one.
    """

    standalone: ClassVar[bool] = False
