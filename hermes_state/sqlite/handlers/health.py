"""The in-place repair (``RepairStore``): recount drifted counters, drop expired leases.

SQLite has no index a failed build leaves invalid (damaged files are the
file repair's business, ``repair_state_db_schema``), so that step of the
PostgreSQL handler has nothing to do here.
"""

from __future__ import annotations

from typing import Any

from ...commands.health import RepairStore
from ...repairs import LEASE_TABLES, leases_step, recount_step
from .registry import handles

# Sessions whose message_count cannot be right (the rule of the PostgreSQL integrity
# check): above the rows held, or different from them while every row is active and
# uncompacted (rewinds, compaction and archiving replaces legitimately make them differ).
_DRIFT_SQL = """
WITH stored AS (
    SELECT session_id, COUNT(*) AS n, MIN(COALESCE(active, 0) = 1 AND COALESCE(compacted, 0) = 0) AS plain
    FROM messages GROUP BY session_id
)
SELECT s.id, COALESCE(s.message_count, 0), COALESCE(st.n, 0)
FROM sessions AS s LEFT JOIN stored AS st ON st.session_id = s.id
WHERE COALESCE(s.message_count, 0) > COALESCE(st.n, 0)
   OR (COALESCE(st.plain, 1) AND COALESCE(s.message_count, 0) <> COALESCE(st.n, 0))
ORDER BY s.id
"""


@handles(RepairStore)
def repair_store(conn: Any, cmd: RepairStore) -> list[str]:
    steps: list[str] = []
    drifted = conn.execute(_DRIFT_SQL).fetchall()  # the writer holds the file lock: no append can slip in
    if drifted:
        conn.executemany("UPDATE sessions SET message_count = ? WHERE id = ?", [(row[2], row[0]) for row in drifted])
        steps.append(recount_step(drifted))
    for lease in LEASE_TABLES:
        expired = conn.execute(
            f"SELECT {lease.key}, holder FROM {lease.table} WHERE expires_at < ? ORDER BY {lease.key}", (cmd.now,)
        ).fetchall()
        if expired:
            conn.execute(f"DELETE FROM {lease.table} WHERE expires_at < ?", (cmd.now,))
            steps.append(leases_step(lease, expired))
    return steps
