"""Commands that maintain the full-text indexes (search itself is a read)."""

from __future__ import annotations

from typing import ClassVar

from .base import Command


class RepairFtsIndexes(Command, frozen=True):
    """Rebuild every present FTS index in place after a search met corruption.

    Resolves to how many indexes were rebuilt.
    """


class FtsRebuildStep(Command, frozen=True):
    """Backfill the next chunk of a deferred rebuild (base + trigram, or the CJK index).

    ``cjk`` picks the CJK index. Resolves to True while rows remain; the
    last chunk also sweeps the boundary and clears the markers.
    """

    cjk: bool = False
    chunk_rows: int = 500


class RepairOptimizeBookkeeping(Command, frozen=True):
    """Heal half-written backfill markers, or seed a backfill for an empty index. Resolves to None."""


class DemoteLegacyFts(Command, frozen=True):
    """Move the legacy inline FTS tables aside and create the current layout with a deferred backfill.

    Runs outside a group transaction (it rewrites the schema catalog).
    Resolves to the backfill's high-water id.
    """

    standalone: ClassVar[bool] = True


class EnsureFtsTables(Command, frozen=True):
    """Create missing current-layout FTS tables and triggers (resuming an interrupted migration).

    Resolves to None.
    """


class ResetStaleCjkIndex(Command, frozen=True):
    """Recreate a stale CJK index (and seed its backfill) when the tokenizer is loaded.

    Resolves to True when the index was reset.
    """


class FtsTrashTeardownStep(Command, frozen=True):
    """Delete one chunk of a demoted legacy shadow table, dropping it once empty.

    Resolves to True while demoted tables remain.
    """

    chunk_rows: int = 500


class SettleFtsStorage(Command, frozen=True):
    """Record FTS storage version 1 when nothing is pending.

    Resolves to None on success or the reason it cannot settle
    (``backfill_incomplete`` / ``teardown_incomplete``).
    """


class CompactDatabase(Command, frozen=True):
    """VACUUM, then a TRUNCATE checkpoint (after an FTS storage migration). Resolves to True.

    Runs outside any transaction.
    """

    standalone: ClassVar[bool] = True


class OptimizeFts(Command, frozen=True):
    """FTS5 ``'optimize'`` on each present index, each committed on its own.

    Resolves to how many succeeded.
    """

    standalone: ClassVar[bool] = True


class RebuildFts(Command, frozen=True):
    """FTS5 ``'rebuild'`` on each present index, each committed on its own.

    Resolves to how many succeeded.
    """

    standalone: ClassVar[bool] = True
