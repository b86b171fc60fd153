"""Apply one batch of commands as one PostgreSQL transaction on the writer's own connection.

Order of work in the transaction:

1. Lock the row of every session the batch names, sorted by id, with one
   ``SELECT ... FOR UPDATE``. Every process locks in the same order, so two
   workers never deadlock on each other's sessions, and message ids drawn
   while the lock is held follow commit order within a session.
2. Runs of consecutive same-type commands with a bulk handler go in one
   savepoint through it (appends: one statement per run); a bulk path that
   raises is rolled back and its commands are applied one by one.
3. Every other command runs in its own savepoint: one that raises is rolled
   back alone and only its caller gets the exception.

A batch of one command needs no savepoint: the transaction is its savepoint.
``standalone`` commands (VACUUM and the like) run outside any transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..backend import Outcome
from ..commands.base import Command
from .errors import to_store_error
from .handlers import BULK_HANDLERS, handler_for

__all__ = ["apply_batch", "session_ids_of"]

log = logging.getLogger("hermes_state.postgres.writer")

_LOCK_SQL = "SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE"


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


async def _lock_sessions(conn: Any, commands: Sequence[Command]) -> None:
    ids = sorted({sid for command in commands for sid in session_ids_of(command)})
    if ids:
        await conn.execute(_LOCK_SQL, ids)


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


async def _apply_transaction(conn: Any, commands: Sequence[Command]) -> list[Outcome]:
    if len(commands) == 1:
        command = commands[0]
        try:
            async with conn.transaction():
                await _lock_sessions(conn, commands)
                result = await handler_for(command)(conn, command)
        except Exception as exc:
            if not conn.is_closed():
                return [(False, to_store_error(exc))]
            raise
        return [(True, result)]
    outcomes: list[Outcome | None] = [None] * len(commands)
    async with conn.transaction():
        await _lock_sessions(conn, commands)
        for run in _runs(commands):
            if len(run) > 1:
                bulk = await _try_bulk(conn, [commands[p] for p in run])
                if bulk is not None:
                    for pos, outcome in zip(run, bulk):
                        outcomes[pos] = outcome
                    continue
            for pos in run:
                outcomes[pos] = await _apply_one(conn, commands[pos])
    return [o if o is not None else (False, RuntimeError("command was not applied")) for o in outcomes]


async def _apply_standalone(conn: Any, command: Command) -> Outcome:
    try:
        return (True, await handler_for(command)(conn, command))
    except Exception as exc:
        return (False, to_store_error(exc))


async def apply_batch(conn: Any, commands: Sequence[Command]) -> list[Outcome]:
    """Apply ``commands`` in order; returns one outcome per command.

    Raises only when a transaction as a whole cannot run or commit (the
    connection dropped, a deadlock at the lock step); then none of that
    transaction's commands were applied.
    """
    if not any(c.standalone for c in commands):
        return await _apply_transaction(conn, commands)
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
