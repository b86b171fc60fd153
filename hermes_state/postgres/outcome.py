"""Whether a batch whose COMMIT reply was lost committed: look its token up, fencing it.

The writer's transaction inserts its batch token into ``write_batches``
before COMMIT. After the connection drops, a fresh connection inserts the
same token. A primary-key insert waits for any transaction still holding
that key uncommitted (the old server process may still be finishing the
COMMIT), so the answer is final: a conflict means the batch committed; an
insert that goes through means it never will (its transaction is over), and
the fence is rolled back again, leaving nothing behind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["batch_committed"]

_FENCE_SQL = "INSERT INTO write_batches (token) VALUES ($1) ON CONFLICT (token) DO NOTHING RETURNING token"


async def batch_committed(conn: Any, token: str) -> bool:
    """True when the batch that inserted ``token`` committed; False when it did not and cannot."""
    tx = conn.transaction()
    await tx.start()
    try:
        inserted = await conn.fetchval(_FENCE_SQL, token)
    finally:
        await tx.rollback()
    return inserted is None
