"""The in-place repair (``RepairStore``): rebuild invalid indexes, recount drifted counters, drop expired leases."""

from __future__ import annotations

from typing import Any

from ...commands.health import RepairStore
from ...repairs import LEASE_TABLES, leases_step, recount_step
from ..clock import DB_NOW
from ..queries.health import DRIFT_SQL, INDEX_STATE_SQL
from ..schema import TABLES
from .registry import handles


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def _reindex_invalid(conn: Any) -> list[str]:
    """``REINDEX`` each invalid index on the store's tables (what a failed or interrupted build leaves).

    Each runs in its own savepoint, so one that cannot be rebuilt (a unique
    index over duplicate rows) is reported and the others still are. The
    table takes no writes until the batch commits.
    """
    import asyncpg  # type: ignore[import-untyped]

    steps: list[str] = []
    for row in await conn.fetch(INDEX_STATE_SQL, list(TABLES)):
        if row["valid"]:
            continue
        try:
            async with conn.transaction():
                await conn.execute(f"REINDEX INDEX {_identifier(row['name'])}")
            steps.append(f"rebuilt invalid index {row['name']} on {row['table_name']}")
        except asyncpg.PostgresError as exc:
            steps.append(f"could not rebuild index {row['name']}: {exc}")
    return steps


async def _recount(conn: Any) -> list[str]:
    """Set each drifted ``message_count`` back to the rows held; appends to those sessions wait meanwhile."""
    candidates = [row["id"] for row in await conn.fetch(DRIFT_SQL)]
    if not candidates:
        return []
    # Appends lock their session row first: once these are locked, the count below is current.
    await conn.execute("SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE", candidates)
    rows = await conn.fetch(
        f"UPDATE sessions AS s SET message_count = d.stored FROM ({DRIFT_SQL}) AS d "
        "WHERE s.id = d.id AND s.id = ANY($1::text[]) RETURNING s.id, d.counted, d.stored",
        candidates,
    )
    return [recount_step(sorted(tuple(row) for row in rows))] if rows else []


@handles(RepairStore)
async def repair_store(conn: Any, cmd: RepairStore) -> list[str]:
    steps = await _reindex_invalid(conn)
    steps.extend(await _recount(conn))
    for lease in LEASE_TABLES:
        expired = await conn.fetch(
            f"DELETE FROM {lease.table} WHERE expires_at < {DB_NOW} RETURNING {lease.key}, holder"
        )
        if expired:
            steps.append(leases_step(lease, sorted(tuple(row) for row in expired)))
    return steps
