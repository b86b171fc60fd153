"""Apply one batch of commands as one PostgreSQL transaction on the writer's own connection.

Order of work in the transaction:

1. Lock the row of every session the batch names, sorted by id, with one
   ``SELECT ... FOR UPDATE``. Every process locks in the same order, so two
   workers never deadlock on each other's sessions, and message ids drawn
   while the lock is held follow commit order within a session. In the same
   statement, the turn-lease rows of the conversations its fenced writes
   name (``FOR NO KEY UPDATE``, after the sessions): a takeover waits for
   the batch, so no fenced write commits after its lease changed hands.
2. Runs of consecutive same-type commands with a bulk handler go through
   it (appends: one statement per run); every other command through its own
   handler.

The first attempt uses no savepoints: every savepoint is two more round
trips, and commands rarely raise. If a handler raises, that transaction is
rolled back and the batch is applied again with isolation: each bulk run in
a savepoint (a run that raises falls back to one savepoint per command),
every other command in its own savepoint, so one that raises is rolled back
alone and only its caller gets the exception. A lost connection, or a
server that turned read-only (SQLSTATE 25006, a demoted primary), fails the
whole batch and is never retried here (the backend reconnects).
With a ``token``, the transaction also inserts it into ``write_batches`` (and
deletes the writer's previous one) in the same statement that takes the
session locks (one round trip fewer per batch), and the outcomes are put in
``done`` before COMMIT is sent, so a caller that loses the COMMIT reply can find out
whether the batch committed and, if it did, what each command returned.
``standalone`` commands (VACUUM and the like) run outside any transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..backend import Outcome
from ..commands.base import Command
from .errors import is_disconnect, to_store_error
from .failover import is_read_only_error
from .handlers import BULK_HANDLERS, handler_for

__all__ = ["BatchToken", "apply_batch", "session_ids_of"]

log = logging.getLogger("hermes_state.postgres.writer")

_LOCK_SQL = "SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE"
# The lock and the token in one statement: data-modifying CTEs run even though the
# SELECT does not read them.
_LOCK_TOKEN_SQL = (
    "WITH gone AS (DELETE FROM write_batches WHERE token = $3), "
    "made AS (INSERT INTO write_batches (token) VALUES ($2)) " + _LOCK_SQL
)

Done = list[list[Outcome]]


class BatchToken:
    """This batch's token and the writer's previous one (deleted in the same transaction)."""

    __slots__ = ("token", "previous")

    def __init__(self, token: str, previous: str | None) -> None:
        self.token = token
        self.previous = previous


def _finish(done: Done | None, outcomes: list[Outcome]) -> None:
    """Last step before COMMIT: hand the outcomes out (the token went in with the locks)."""
    if done is not None:
        done.append(outcomes)


def session_ids_of(command: Command) -> list[str]:
    """The sessions a command changes or hangs a row on (locked before the batch runs)."""
    found = []
    for name in ("session_id", "parent_session_id"):
        value = getattr(command, name, None)
        if isinstance(value, str):
            found.append(value)
    many = getattr(command, "session_ids", None)
    if isinstance(many, (tuple, list)):
        found.extend(v for v in many if isinstance(v, str))
    return found


def fenced_session_of(command: Command) -> str | None:
    """The session whose conversation's turn lease a fenced command must hold, else None."""
    if getattr(command, "fence", None) is None:
        return None
    return getattr(command, "session_id", None) or getattr(command, "parent_session_id", None)


async def _lock_sessions(conn: Any, commands: Sequence[Command], token: BatchToken | None) -> None:
    """Lock the batch's session rows in id order, then the turn leases its fenced writes check.

    A takeover updates the lease row, so it waits for this transaction: a
    fenced write can never commit after its lease changed hands. Records
    ``token`` in the same round trip.
    """
    ids = sorted({sid for command in commands for sid in session_ids_of(command)})
    fenced = sorted({sid for sid in map(fenced_session_of, commands) if sid is not None})
    if fenced:
        if token is not None:
            await conn.execute(_LOCK_TOKEN_LEASES_SQL, ids, token.token, token.previous, fenced)
        else:
            await conn.execute(_LOCK_LEASES_SQL, ids, fenced)
    elif token is not None:
        await conn.execute(_LOCK_TOKEN_SQL, ids, token.token, token.previous)
    elif ids:
        await conn.execute(_LOCK_SQL, ids)


def _leases_cte(param: int) -> str:
    """A CTE locking the lease rows of the conversations of sessions ``$param``, after ``locked``.

    Every writer locks sessions before leases (an acquire holds its session
    row, then the lease row), so no two can deadlock. Reading ``locked``
    in the condition makes PostgreSQL lock the sessions first.
    """
    return (
        "leases AS (SELECT l.conversation_id FROM session_turn_leases AS l "
        "WHERE (SELECT count(*) FROM locked) >= 0 AND l.conversation_id IN ("
        f"SELECT COALESCE((SELECT conversation_id FROM sessions WHERE id = f.id), f.id) FROM unnest(${param}::text[]) AS f(id)) "
        "ORDER BY l.conversation_id FOR NO KEY UPDATE)"
    )


_LOCK_LEASES_SQL = f"WITH locked AS ({_LOCK_SQL}), {_leases_cte(2)} SELECT count(*) FROM leases"
_LOCK_TOKEN_LEASES_SQL = (
    "WITH gone AS (DELETE FROM write_batches WHERE token = $3), made AS (INSERT INTO write_batches (token) VALUES ($2)), "
    f"locked AS ({_LOCK_SQL}), {_leases_cte(4)} SELECT count(*) FROM leases"
)


def _runs(commands: Sequence[Command]) -> list[list[int]]:
    runs: list[list[int]] = []
    for pos, command in enumerate(commands):
        kind = type(command)
        if runs and kind in BULK_HANDLERS and type(commands[runs[-1][-1]]) is kind:
            runs[-1].append(pos)
        else:
            runs.append([pos])
    return runs


async def _apply_one(conn: Any, command: Command) -> Outcome:
    try:
        async with conn.transaction():  # a savepoint inside the batch transaction
            result = await handler_for(command)(conn, command)
    except Exception as exc:
        if is_read_only_error(exc):
            raise  # the server, not the command: the backend reconnects to a writable host
        return (False, to_store_error(exc))
    return (True, result)


async def _try_bulk(conn: Any, commands: list[Command]) -> list[Outcome] | None:
    try:
        async with conn.transaction():
            results = await BULK_HANDLERS[type(commands[0])](conn, commands)
    except Exception as exc:
        log.debug("bulk path declined (%s); applying %d commands one by one", exc, len(commands))
        return None
    return [(ok, value if ok else to_store_error(value)) for ok, value in results]


async def _apply_optimistic(
    conn: Any, commands: Sequence[Command], token: BatchToken | None, done: Done | None
) -> list[Outcome]:
    """Every run through its bulk or single handler in one transaction, no savepoints; raises if any handler does."""
    outcomes: list[Outcome] = []
    async with conn.transaction():
        await _lock_sessions(conn, commands, token)
        for run in _runs(commands):
            if len(run) > 1:
                results = await BULK_HANDLERS[type(commands[run[0]])](conn, [commands[p] for p in run])
                outcomes.extend((ok, value if ok else to_store_error(value)) for ok, value in results)
            else:
                outcomes.append((True, await handler_for(commands[run[0]])(conn, commands[run[0]])))
        _finish(done, outcomes)
    return outcomes


async def _apply_transaction(
    conn: Any, commands: Sequence[Command], token: BatchToken | None = None, done: Done | None = None
) -> list[Outcome]:
    if len(commands) > 1:
        try:
            return await _apply_optimistic(conn, commands, token, done)
        except Exception as exc:
            if conn.is_closed() or is_disconnect(exc) or is_read_only_error(exc):
                raise
            log.debug("batch of %d raised (%s); applying it again with a savepoint per command", len(commands), exc)
    if len(commands) == 1:
        command = commands[0]
        try:
            async with conn.transaction():
                await _lock_sessions(conn, commands, token)
                result = await handler_for(command)(conn, command)
                _finish(done, [(True, result)])
        except Exception as exc:
            if not conn.is_closed() and not is_read_only_error(exc):
                return [(False, to_store_error(exc))]
            raise
        return [(True, result)]
    outcomes: list[Outcome | None] = [None] * len(commands)
    async with conn.transaction():
        await _lock_sessions(conn, commands, token)
        for run in _runs(commands):
            if len(run) > 1:
                bulk = await _try_bulk(conn, [commands[p] for p in run])
                if bulk is not None:
                    for pos, outcome in zip(run, bulk):
                        outcomes[pos] = outcome
                    continue
            for pos in run:
                outcomes[pos] = await _apply_one(conn, commands[pos])
        final = [o if o is not None else (False, RuntimeError("command was not applied")) for o in outcomes]
        _finish(done, final)
    return final


async def _apply_standalone(conn: Any, command: Command) -> Outcome:
    try:
        return (True, await handler_for(command)(conn, command))
    except Exception as exc:
        if is_read_only_error(exc):
            raise
        return (False, to_store_error(exc))


async def apply_batch(
    conn: Any, commands: Sequence[Command], token: BatchToken | None = None, done: Done | None = None
) -> list[Outcome]:
    """Apply ``commands`` in order; returns one outcome per command.

    Raises only when a transaction as a whole cannot run or commit (the
    connection dropped, a deadlock at the lock step); then none of that
    transaction's commands were applied, unless the COMMIT itself was lost
    (``done`` then holds the outcomes, and the token tells). ``token`` and
    ``done`` apply to a batch without standalone commands (one transaction).
    """
    if not any(c.standalone for c in commands):
        return await _apply_transaction(conn, commands, token, done)
    outcomes: list[Outcome] = []
    group: list[Command] = []
    for command in [*commands, None]:
        if command is not None and not command.standalone:
            group.append(command)
            continue
        if group:
            outcomes.extend(await _apply_transaction(conn, group))
            group = []
        if command is not None:
            outcomes.append(await _apply_standalone(conn, command))
    return outcomes
