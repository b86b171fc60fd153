"""What an in-place repair touches on either backend, and the lines its report is made of.

``SessionDB.repair_store()`` (and ``hermes-state doctor --repair``) fixes only
what is safe to fix while the store is in use: an index a failed build left
invalid is rebuilt, a ``message_count`` that disagrees with the stored rows is
set back to them, and leases that expired are removed (an expired lease
guards nothing: the next acquirer replaces it). Both backends' handlers
report each step with the same words, built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["LeaseTable", "LEASE_TABLES", "recount_step", "leases_step", "EXAMPLES"]

# Ids named per report line (the counts say how many there were).
EXAMPLES = 5


class LeaseTable(NamedTuple):
    """A table of leases: one row per ``key``, with ``holder``, ``acquired_at`` and ``expires_at`` (epoch seconds)."""

    kind: str  # what reports call these leases
    table: str
    key: str


# Every lease table of the schema.
LEASE_TABLES: tuple[LeaseTable, ...] = (
    LeaseTable("compression", "compression_locks", "session_id"),
    LeaseTable("turn", "session_turn_leases", "conversation_id"),
)


def _examples(items: Sequence[str]) -> str:
    shown = ", ".join(items[:EXAMPLES])
    return shown + (f" and {len(items) - EXAMPLES} more" if len(items) > EXAMPLES else "")


def recount_step(rows: Sequence[Sequence[Any]]) -> str:
    """The report line for sessions whose ``message_count`` was reset: rows of (id, counted, stored)."""
    return f"recounted message_count of {len(rows)} session(s): " + _examples(
        [f"{row[0]} {row[1]} -> {row[2]}" for row in rows]
    )


def leases_step(lease: LeaseTable, rows: Sequence[Sequence[Any]]) -> str:
    """The report line for removed expired leases: rows of (key, holder)."""
    return f"removed {len(rows)} expired {lease.kind} lease(s): " + _examples([f"{row[0]} of {row[1]}" for row in rows])
