"""FTS upkeep commands on PostgreSQL: what each FTS5 operation means for a GIN index.

PostgreSQL updates the search index inside every writing transaction, so
the FTS5 bookkeeping (deferred backfills, legacy layouts, demoted tables,
the CJK index) never exists here: those steps report "nothing left to do".
``OptimizeFts`` merges the GIN indexes' pending lists (FTS5's segment
merge), ``RebuildFts``/``RepairFtsIndexes`` rebuild them with ``REINDEX``
and ``CompactDatabase`` is ``VACUUM (ANALYZE)`` of the store's tables (the
maintenance module's ``Vacuum``).
"""

from __future__ import annotations

from typing import Any

from ...commands.maintenance import Vacuum
from ...commands.search import (
    CompactDatabase,
    DemoteLegacyFts,
    EnsureFtsTables,
    FtsRebuildStep,
    FtsTrashTeardownStep,
    OptimizeFts,
    RebuildFts,
    RepairFtsIndexes,
    RepairOptimizeBookkeeping,
    ResetStaleCjkIndex,
    SettleFtsStorage,
)
from .maintenance import _SEARCH_INDEXES_SQL, vacuum
from .registry import handles


async def _search_indexes(conn: Any) -> list[str]:
    return [r[0] for r in await conn.fetch(_SEARCH_INDEXES_SQL)]


@handles(FtsRebuildStep)
async def fts_rebuild_step(conn: Any, cmd: FtsRebuildStep) -> bool:
    """False: no backfill is ever pending (the index is written with the rows)."""
    return False


@handles(FtsTrashTeardownStep)
async def fts_trash_teardown_step(conn: Any, cmd: FtsTrashTeardownStep) -> bool:
    """False: there are no demoted FTS tables to drop."""
    return False


@handles(RepairOptimizeBookkeeping)
@handles(DemoteLegacyFts)
@handles(EnsureFtsTables)
@handles(ResetStaleCjkIndex)
@handles(SettleFtsStorage)
async def nothing_to_settle(conn: Any, cmd: Any) -> None:
    """None: the FTS5 layout steps have no PostgreSQL counterpart (settled by construction)."""
    return


@handles(CompactDatabase)
async def compact_database(conn: Any, cmd: CompactDatabase) -> bool:
    """VACUUM (ANALYZE) the store's tables after merging the search indexes; returns True."""
    await vacuum(conn, Vacuum())
    return True


@handles(OptimizeFts)
async def optimize_fts(conn: Any, cmd: OptimizeFts) -> int:
    """Merge each GIN search index's pending list into the index; returns how many were merged."""
    async with conn.transaction():  # behind a transaction pooler, search_path holds only in transactions
        names = await _search_indexes(conn)
        for name in names:
            await conn.execute("SELECT gin_clean_pending_list($1::regclass)", f'"{name}"')
    return len(names)


async def _reindex(conn: Any) -> int:
    async with conn.transaction():  # as above; REINDEX INDEX may run in a transaction
        names = await _search_indexes(conn)
        for name in names:
            await conn.execute(f'REINDEX INDEX "{name}"')
    return len(names)


@handles(RebuildFts)
async def rebuild_fts(conn: Any, cmd: RebuildFts) -> int:
    """REINDEX each GIN search index of ``messages``; returns how many were rebuilt."""
    return await _reindex(conn)


@handles(RepairFtsIndexes)
async def repair_fts_indexes(conn: Any, cmd: RepairFtsIndexes) -> int:
    """REINDEX the search indexes (a search never asks for it here); returns how many were rebuilt."""
    return await _reindex(conn)
