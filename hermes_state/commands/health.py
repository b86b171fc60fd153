"""The in-place repair ``SessionDB.repair_store()`` queues (see ``hermes_state.repairs``)."""

from __future__ import annotations

from .base import Command


class RepairStore(Command, frozen=True):
    """Rebuild invalid indexes (PostgreSQL), recount drifted ``message_count``, drop leases expired before ``now``.

    Resolves to the report lines of the steps that changed something, in order.
    """

    now: float
