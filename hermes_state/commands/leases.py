"""Commands for session turn leases, and the fence a transcript write carries.

A turn lease serializes whole agent turns of one conversation across
processes and hosts that share a store. It is keyed by the conversation id
(``sessions.conversation_id``; a session id with no row yet keys itself).
Every acquisition draws a new fencing token from a store-wide counter, so
tokens only grow, also across releases; a fenced write names the holder
and, through a :meth:`~hermes_state.SessionDB.session_turn` context, the
token it holds, and is checked against the lease row inside its own
transaction.
"""

from __future__ import annotations

import msgspec

from .base import Command


class TurnFence(msgspec.Struct, frozen=True, kw_only=True):
    """What a fenced transcript write must still hold when its transaction runs.

    ``token`` None checks the holder alone (upstream's ``turn_lease_holder``
    contract). A lease that expired but was not taken over (same holder,
    same token) is renewed to now + ``ttl_seconds`` by the write.
    """

    holder: str
    token: int | None = None
    ttl_seconds: float = 300.0


class AcquireTurnLease(Command, frozen=True):
    """Take the conversation's turn lease unless a live holder owns it.

    An expired lease, or one whose recorded process (same host, same pid and
    start time) is gone, is taken over. Held already by ``holder`` from this
    same process: True without extending, unless ``exclusive`` (then it
    counts as held by another turn). ``host``/``pid``/``started`` identify
    the acquiring process.

    Waiters queue: a free lease goes to the live waiter with the lowest
    ticket, so an acquire with ``ticket`` None succeeds only when nobody
    waits, and one with a ``ticket`` only when no live ticket is lower. With
    ``queue``, an acquire that does not succeed keeps (or, when its ticket
    is gone, draws) a ticket, valid for ``queue_ttl_seconds``; a granted
    acquire drops its ticket. Resolves to ``(acquired, token,
    conversation_id, fresh, ticket)``: ``fresh`` True when this acquire took
    the lease (not a re-entrant True), ``ticket`` the caller's ticket now.
    """

    session_id: str
    holder: str
    ttl_seconds: float
    host: str | None
    pid: int
    started: int | None
    exclusive: bool = False
    ticket: int | None = None
    queue: bool = False
    queue_ttl_seconds: float = 15.0


class WithdrawTurnTicket(Command, frozen=True):
    """Leave the queue of a turn lease: delete waiter ``ticket``. Resolves to ``(withdrawn, conversation_id)``."""

    ticket: int


class RefreshTurnLease(Command, frozen=True):
    """Set the lease's expiry to now + ttl if ``holder`` (and ``token``, when given) still own the row.

    An expired row nobody took over is revived. Resolves to whether it did.
    """

    session_id: str
    holder: str
    ttl_seconds: float
    token: int | None = None


class ReleaseTurnLease(Command, frozen=True):
    """Delete the lease row when ``holder`` (and ``token``, when given) own it.

    Resolves to ``(released, conversation_id)``; a release wakes the
    conversation's waiters.
    """

    session_id: str
    holder: str
    token: int | None = None
