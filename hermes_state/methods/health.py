"""Health checks a doctor or a monitoring probe runs (integrity, leases) and the in-place repair."""

from __future__ import annotations

import time
from typing import Any

from ..commands.health import RepairStore
from ..facade import StoreBase

__all__ = ["HealthMethods"]


class HealthMethods(StoreBase):
    """Read-only checks; they work on read-only stores and never enter the write queue."""

    async def integrity_problems(self) -> list[str]:
        """Check the store for damage; returns ``[]`` when clean, else the first problems found (one line each).

        SQLite runs ``PRAGMA integrity_check`` on the file; PostgreSQL checks
        the store's schema objects, indexes, counters and links (the server
        checks its own pages).
        """
        return list(await self._query("integrity_problems"))

    async def compression_leases(self) -> list[dict[str, Any]]:
        """Return every compression lease row, oldest first.

        Each dict has ``session_id``, ``holder``, ``acquired_at``,
        ``expires_at`` (epoch seconds) and ``live`` (not yet expired).
        Expired rows are harmless: the next acquirer replaces them.
        """
        now = time.time()
        rows = await self._query("compression_leases")
        return [{**row, "live": row["expires_at"] is not None and row["expires_at"] > now} for row in rows]

    async def leases(self) -> list[dict[str, Any]]:
        """Return every lease the store holds, of every kind, oldest acquisition first.

        Each dict has ``kind`` (``"compression"`` for the compression locks),
        ``key`` (what the lease is on, e.g. the session id), ``holder``,
        ``acquired_at``, ``expires_at`` (epoch seconds) and ``live`` (not yet
        expired). Expired rows guard nothing: the next acquirer replaces them,
        and :meth:`repair_store` removes them.
        """
        now = time.time()
        rows = await self._query("leases")
        return [{**row, "live": row["expires_at"] is not None and row["expires_at"] > now} for row in rows]

    async def repair_store(self) -> dict[str, Any]:
        """Fix in place what is safe to fix while the store is in use; returns a report.

        Indexes a failed or interrupted build left invalid are rebuilt
        (PostgreSQL's ``REINDEX``, which holds writes to that table until it
        is done), a ``message_count`` that disagrees with the stored rows (see
        :meth:`integrity_problems` on PostgreSQL) is set back to them, and
        expired leases are removed, all in one transaction. Rows are never
        deleted or invented: orphans and missing schema objects stay for a
        person. A damaged SQLite file needs ``repair_state_db_schema`` instead.

        Returns ``{"ok", "steps", "problems", "integrity"}``: ``steps`` one
        line per change (empty when there was nothing to do), ``problems``
        what :meth:`integrity_problems` still finds, ``integrity`` those
        joined (or ``"ok"``), ``ok`` whether none remain. Raises on a
        read-only store.
        """
        steps = list(await self._write(RepairStore(now=time.time())))
        problems = await self.integrity_problems()
        return {"ok": not problems, "steps": steps, "problems": problems, "integrity": "; ".join(problems) or "ok"}

    async def writer_stats(self) -> dict[str, Any]:
        """Return this store's write-path counters (no I/O; works before open and after close).

        ``commands`` committed in ``batches`` group commits, ``commands_per_batch``
        their ratio rounded (0.0 before the first commit), ``running`` whether
        the writer accepts writes (its task runs only while writes are queued;
        never on a read-only store); ``queue_depth``
        (commands waiting), ``commands_per_batch_mean`` / ``_max``,
        ``commit_latency_p50_ms`` / ``commit_latency_p99_ms`` over the last 1024
        batches (None before the first) with ``latency_window`` their count,
        ``failed_commands`` (callers that got an error), ``retried_batches``
        (re-applied after a lost connection proved them not committed) and
        ``reconnects`` (writer connections replaced; always 0 on SQLite) and
        ``read_routing`` (PostgreSQL with ``read_replicas``: reads per route,
        waits for a replica to replay this store's writes, replicas skipped as
        lagging or down, and each replica's last known lag; None otherwise). The
        actor logs the same counters at DEBUG on ``hermes_state.actor`` at most
        once a minute.
        """
        stats = self._actor.stats()
        batches, commands = stats["batches_applied"], stats["commands_applied"]
        return {
            "batches": batches,
            "commands": commands,
            "commands_per_batch": round(commands / batches, 2) if batches else 0.0,
            "running": self._actor.running,
            **stats,
            "reconnects": int(getattr(self._backend, "reconnects", 0)),
            # PostgreSQL with read replicas: reads per route and each replica's lag (else None).
            "read_routing": getattr(self._backend, "read_routing", lambda: None)(),
        }
