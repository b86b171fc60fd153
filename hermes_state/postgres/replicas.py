"""Read replicas: which reads a standby may answer, and when the primary answers instead.

Consistency promise: a read that follows this store's own acknowledged write
sees that write. After each committed batch the writer records the
primary's WAL position (``pg_current_wal_lsn()``, at or past the batch's
commit record); a replica serves a read only once its replay position
(``pg_last_wal_replay_lsn()``, checked before the read's snapshot is taken)
has reached it. A replica behind that position is waited for up to
``replica_wait`` seconds (polled), then the read goes to the primary. Writes
of other processes show up on a replica within its lag; a replica lagging
more than ``replica_max_lag`` seconds, one that cannot be reached, or one
that is not a standby (promoted) is skipped (a down one is retried after a
pause). Reads that coordinate with other processes (leases, compression
locks, maintenance and health checks) always go to the primary.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .dsn import redact_dsn
from .errors import is_disconnect
from .pool import ConnectionPool

__all__ = ["PRIMARY_ONLY", "Replica", "ReplicaSet", "format_lsn", "parse_lsn"]

# Query names whose answer must be current, not merely include this store's own writes.
PRIMARY_ONLY = frozenset({
    "turn_lease_state", "turn_leases", "leases", "compression_lock_holder", "compression_leases",
    "compression_counter", "compression_cooldown_row", "live_compression_child", "compression_tip_id",
    "active_message_watermark", "integrity_problems", "table_columns", "logical_size", "prune_candidates",
    "open_prune_match_count", "session_delete_targets",
})

# Replay position, and lag: zero while everything received is replayed (an idle primary sends
# nothing, so the last replayed commit's age would overstate it), else the age of that commit.
_PROBE_SQL = (
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text, "
    "CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0 "
    "ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8, 0.0) END"
)
_PROBE_INTERVAL = 0.5  # seconds a replica's lag reading is trusted
_DOWN_PAUSE = 2.0  # seconds before a failed replica is tried again
_POLL = 0.005  # seconds between replay checks while waiting for an own write


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` as a byte position."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def format_lsn(position: int) -> str:
    """A byte position in PostgreSQL's ``X/Y`` notation."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


class Replica:
    """One replica's pool and what the last probe said about it."""

    def __init__(self, dsn: str, pool: ConnectionPool) -> None:
        self.dsn = dsn
        self.label = redact_dsn(dsn)
        self.pool = pool
        self.replay = -1  # replay position; -1 before the first probe
        self.lag: float | None = None
        self.checked = float("-inf")
        self.down_until = float("-inf")
        self.error: str | None = None
        self.reads = 0

    def state(self, max_lag: float) -> str:
        if time.monotonic() < self.down_until:
            return "down"
        if self.lag is not None and self.lag > max_lag:
            return "lagging"
        return "up" if self.lag is not None else "unknown"


class ReplicaSet:
    """Routes reads over the replicas (round robin) under the consistency promise above."""

    def __init__(self, replicas: list[Replica], *, max_lag: float, wait: float) -> None:
        self.replicas = replicas
        self.max_lag = max_lag
        self.wait = wait
        self.own_write: int | None = 0  # WAL position of this store's last write; None: unknown
        self._next = 0
        self.counts = {"primary": 0, "replica": 0, "waited": 0, "behind_own_write": 0, "skipped_lagging": 0,
                       "skipped_down": 0}

    async def open(self) -> None:
        for replica in self.replicas:
            await replica.pool.open()

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.pool.close()

    def wrote(self, lsn_text: str | None) -> None:
        """Record the primary's WAL position after this store's write (None: it could not be read)."""
        # Read after the write committed, so at or past every earlier write too.
        self.own_write = None if lsn_text is None else parse_lsn(lsn_text)

    async def choose(self, name: str) -> Replica | None:
        """A replica fit to answer query ``name`` now, or None for the primary."""
        need = self.own_write
        if name in PRIMARY_ONLY or need is None or not self.replicas:
            return None
        start = self._next
        self._next = (start + 1) % len(self.replicas)
        for offset in range(len(self.replicas)):
            replica = self.replicas[(start + offset) % len(self.replicas)]
            if time.monotonic() < replica.down_until:
                self.counts["skipped_down"] += 1
            elif await self._ready(replica, need):
                return replica
        return None

    async def _ready(self, replica: Replica, need: int) -> bool:
        if (time.monotonic() - replica.checked > _PROBE_INTERVAL or replica.replay < need) and not await self._probe(replica):
            self.counts["skipped_down"] += 1
            return False
        if replica.lag is not None and replica.lag > self.max_lag:
            self.counts["skipped_lagging"] += 1
            return False
        if replica.replay >= need:
            return True
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline:
            await asyncio.sleep(_POLL)
            if not await self._probe(replica):
                self.counts["skipped_down"] += 1
                return False
            if replica.replay >= need:
                self.counts["waited"] += 1
                return True
        self.counts["behind_own_write"] += 1
        return False

    async def _probe(self, replica: Replica) -> bool:
        """Read the replica's replay position and lag; False (and the replica paused) when it cannot serve."""
        try:
            async with replica.pool.acquire() as conn:
                standby, replay, lag = await conn.fetchrow(_PROBE_SQL)
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            self.failed(replica, exc)
            return False
        if not standby or replay is None:
            self.failed(replica, RuntimeError("not a standby (promoted?); its reads would miss this store's writes"))
            return False
        replica.replay, replica.lag, replica.checked, replica.error = parse_lsn(replay), float(lag), time.monotonic(), None
        return True

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """Skip ``replica`` for a while after ``exc`` (unreachable, lost connection, not a standby)."""
        replica.down_until = time.monotonic() + _DOWN_PAUSE
        replica.error = f"{type(exc).__name__}: {exc}"

    def stats(self) -> dict[str, Any]:
        """Routing counts and each replica's last known lag (no I/O)."""
        return {
            **self.counts,
            "own_write_lsn": format_lsn(self.own_write) if self.own_write else None,
            "replicas": [
                {
                    "url": r.label,
                    "state": r.state(self.max_lag),
                    "lag_seconds": r.lag,
                    "replay_lsn": format_lsn(r.replay) if r.replay >= 0 else None,
                    "reads": r.reads,
                    "error": r.error,
                }
                for r in self.replicas
            ],
        }
