"""Handlers for session turn leases (the rules of ``sqlite.handlers.turn_leases``).

PostgreSQL has no file-wide write lock, so the lease row is: an acquire
reads it ``FOR UPDATE`` (a competing acquire, and a fenced write holding the
row ``FOR NO KEY UPDATE``, are waited for), decides in Python (expiry by the
database clock read after the lock is granted, a dead holder on this host
only) and takes the row over in place with a new token from the
``session_turn_lease_tokens`` sequence. With no row, the insert's
``ON CONFLICT DO NOTHING`` lets exactly one of two racing acquires win.

Waiters queue in ``session_turn_waiters`` (the rules of the SQLite handlers:
the lowest live ticket goes next; tickets come from the token sequence).

A release notifies ``hermes_turn_lease`` (delivered at COMMIT) so waiters in
other processes wake at once (see ``lease_listener``). The notice names the
conversation by ``md5(conversation_id)``: NOTIFY refuses payloads of 8,000
bytes or more, and a conversation id may be longer than that.
"""

from __future__ import annotations

from typing import Any

from ...commands.leases import AcquireTurnLease, RefreshTurnLease, ReleaseTurnLease, WithdrawTurnTicket
from ...rules import turn_lease_takeover_on_loop, turn_waiter_alive_on_loop
from ..clock import DB_NOW
from .common import row_count
from .registry import handles

__all__ = ["LEASE_CHANNEL", "SWEEP_GRACE_SECONDS"]

LEASE_CHANNEL = "hermes_turn_lease"
SWEEP_GRACE_SECONDS = 3600.0
WAITER_GRACE_SECONDS = 60.0
_SWEEP_BATCH = 32
_KEY = "COALESCE((SELECT conversation_id FROM sessions WHERE id = $1), $1)"

_LOCK_SQL = f"""
SELECT k.key, l.holder, l.token, l.expires_at, l.holder_host, l.holder_pid, l.holder_started
FROM (SELECT {_KEY} AS key) AS k
LEFT JOIN LATERAL (
    SELECT * FROM session_turn_leases WHERE conversation_id = k.key FOR UPDATE
) AS l ON true
"""
# The clock is read once per statement, so a lease lasts exactly its TTL.
_TAKE_SQL = f"""
UPDATE session_turn_leases SET holder = $2, acquired_at = c.now, expires_at = c.now + $3,
    token = nextval('session_turn_lease_tokens'), holder_host = $4, holder_pid = $5, holder_started = $6
FROM (SELECT {DB_NOW} AS now) AS c
WHERE conversation_id = $1 RETURNING token
"""
_CLAIM_SQL = f"""
INSERT INTO session_turn_leases (conversation_id, holder, acquired_at, expires_at, token, holder_host, holder_pid,
    holder_started)
SELECT $1, $2, c.now, c.now + $3, nextval('session_turn_lease_tokens'), $4, $5, $6 FROM (SELECT {DB_NOW} AS now) AS c
ON CONFLICT (conversation_id) DO NOTHING RETURNING token
"""
# The clock (read after the lease row's lock was granted) and the waiters queued ahead, in one round trip.
_NOW_AND_AHEAD_SQL = f"""
SELECT c.now, w.ticket, w.expires_at, w.holder_host, w.holder_pid, w.holder_started
FROM (SELECT {DB_NOW} AS now) AS c LEFT JOIN LATERAL (
    SELECT * FROM session_turn_waiters WHERE conversation_id = $1 AND ticket < $2 ORDER BY ticket
) AS w ON true
"""
_ENQUEUE_SQL = f"""
INSERT INTO session_turn_waiters (ticket, conversation_id, holder, expires_at, holder_host, holder_pid, holder_started)
VALUES (nextval('session_turn_lease_tokens'), $1, $2, {DB_NOW} + $3, $4, $5, $6) RETURNING ticket
"""
# After a grant, in one round trip: the caller's own ticket ($4, may be NULL) leaves the queue, and
# leases and waiters long expired are swept (the ticket is kept out of the sweep: one statement
# must not delete a row twice).
_SWEEP_SQL = f"""
WITH mine AS (
    DELETE FROM session_turn_waiters WHERE ticket = $4
), leases AS (
    DELETE FROM session_turn_leases WHERE conversation_id IN (
        SELECT conversation_id FROM session_turn_leases WHERE expires_at < {DB_NOW} - $1
        ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED)
), waiters AS (
    DELETE FROM session_turn_waiters WHERE ticket IN (
        SELECT ticket FROM session_turn_waiters WHERE expires_at < {DB_NOW} - $2 AND ticket IS DISTINCT FROM $4
        ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED)
)
SELECT 1
"""


async def _first_in_queue(conn: Any, rows: list[Any], now: float) -> bool:
    """Whether none of the waiters queued ahead (``rows``) is live; drops the dead ones met."""
    for row in rows:
        if row["ticket"] is None:
            continue
        if await turn_waiter_alive_on_loop(
            float(row["expires_at"]), row["holder_host"], row["holder_pid"], row["holder_started"], now
        ):
            return False
        await conn.execute("DELETE FROM session_turn_waiters WHERE ticket = $1", row["ticket"])
    return True


async def _queue(conn: Any, cmd: AcquireTurnLease, key: str) -> int | None:
    """Keep the caller's ticket fresh, or draw one when it has none (or lost it); None unless ``cmd.queue``."""
    if not cmd.queue:
        return None
    if cmd.ticket is not None:
        kept = await conn.fetchval(
            f"UPDATE session_turn_waiters SET expires_at = {DB_NOW} + $3 WHERE ticket = $1 AND conversation_id = $2 "
            "RETURNING ticket",
            cmd.ticket, key, cmd.queue_ttl_seconds,
        )
        if kept is not None:
            return int(kept)
    return int(await conn.fetchval(_ENQUEUE_SQL, key, cmd.holder, cmd.queue_ttl_seconds, cmd.host, cmd.pid, cmd.started))


async def _drop_ticket(conn: Any, ticket: int | None) -> None:
    if ticket is not None:
        await conn.execute("DELETE FROM session_turn_waiters WHERE ticket = $1", ticket)


@handles(AcquireTurnLease)
async def acquire_turn_lease(conn: Any, cmd: AcquireTurnLease) -> tuple[bool, int | None, str, bool, int | None]:
    row = await conn.fetchrow(_LOCK_SQL, cmd.session_id)
    key = row["key"]
    process = (cmd.host, cmd.pid, cmd.started)
    ahead = await conn.fetch(_NOW_AND_AHEAD_SQL, key, cmd.ticket if cmd.ticket is not None else 1 << 62)
    now = ahead[0]["now"]  # read after the lease row's lock was granted
    verdict = "take"
    if row["holder"] is not None:
        verdict = await turn_lease_takeover_on_loop(
            cmd.holder, cmd.exclusive, row["holder"], float(row["expires_at"]), row["holder_host"],
            row["holder_pid"], row["holder_started"], now,
        )
        if verdict == "held":
            await _drop_ticket(conn, cmd.ticket)
            return True, row["token"], key, False, None
    if verdict == "busy" or not await _first_in_queue(conn, ahead, now):
        return False, None, key, False, await _queue(conn, cmd, key)
    if row["holder"] is not None:
        token = await conn.fetchval(_TAKE_SQL, key, cmd.holder, cmd.ttl_seconds, *process)
    else:
        token = await conn.fetchval(_CLAIM_SQL, key, cmd.holder, cmd.ttl_seconds, *process)
        if token is None:  # another acquire inserted first and committed: its lease
            return False, None, key, False, await _queue(conn, cmd, key)
    await conn.execute(_SWEEP_SQL, SWEEP_GRACE_SECONDS, WAITER_GRACE_SECONDS, _SWEEP_BATCH, cmd.ticket)
    return True, token, key, True, None


@handles(WithdrawTurnTicket)
async def withdraw_turn_ticket(conn: Any, cmd: WithdrawTurnTicket) -> tuple[bool, str | None]:
    key = await conn.fetchval("DELETE FROM session_turn_waiters WHERE ticket = $1 RETURNING conversation_id", cmd.ticket)
    return key is not None, key


def _owner(token: int | None, first: int) -> str:
    return f" AND token = ${first}" if token is not None else ""


@handles(RefreshTurnLease)
async def refresh_turn_lease(conn: Any, cmd: RefreshTurnLease) -> bool:
    args: list[Any] = [cmd.session_id, cmd.holder, cmd.ttl_seconds]
    if cmd.token is not None:
        args.append(cmd.token)
    status = await conn.execute(
        f"UPDATE session_turn_leases SET expires_at = {DB_NOW} + $3 "
        f"WHERE conversation_id = {_KEY} AND holder = $2" + _owner(cmd.token, 4),
        *args,
    )
    return row_count(status) > 0


@handles(ReleaseTurnLease)
async def release_turn_lease(conn: Any, cmd: ReleaseTurnLease) -> tuple[bool, str]:
    args: list[Any] = [cmd.session_id, cmd.holder]
    if cmd.token is not None:
        args.append(cmd.token)
    row = await conn.fetchrow(
        f"WITH k AS (SELECT {_KEY} AS key), gone AS ("
        f"DELETE FROM session_turn_leases WHERE conversation_id = (SELECT key FROM k) AND holder = $2"
        + _owner(cmd.token, 3)
        + " RETURNING conversation_id) "
        f"SELECT (SELECT key FROM k) AS key, (SELECT count(*) FROM gone) AS released, "
        f"(SELECT count(pg_notify('{LEASE_CHANNEL}', json_build_array(current_schema(), md5(conversation_id))::text)) "
        "FROM gone) AS notified",
        *args,
    )
    return row["released"] > 0, row["key"]
