"""Apply one batch of commands as one SQLite transaction, on the writer thread.

The batch is first applied optimistically: no savepoints, runs of appends
through their bulk handler. Savepoints are not free on this schema (FTS5
flushes its pending terms at each one), and almost every batch succeeds.

Only when a command raises is that attempt rolled back and the batch applied
again with per-command isolation: each command inside its own SAVEPOINT, so
the one that raises is rolled back alone and its caller gets the exception
while the rest of the batch commits. Some failures end the whole transaction
(a full disk, an I/O error, SQLite rolling back on its own); the command that
hit one fails with it and the others are applied again in a fresh
transaction, so one bad command never takes its neighbours down.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from ..commands.base import Command
from .damage import is_malformed_error
from .driver import to_stdlib_error
from .handlers import BULK_HANDLERS, handler_for
from .search.recovery import apply_with_fts_recovery

__all__ = ["Outcome", "apply_batch"]

log = logging.getLogger("hermes_state.sqlite.writer")

# (True, result) or (False, exception) per command, in batch order.
Outcome = tuple[bool, Any]

_FATAL_MARKERS = (
    "database or disk is full",
    "disk i/o error",
    "out of memory",
    "database disk image is malformed",
    "file is not a database",
    "readonly database",
)


def _ends_transaction(conn: Any, exc: BaseException) -> bool:
    if not conn.in_transaction:
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _FATAL_MARKERS)


class _BulkEndedTransaction(Exception):
    """SQLite rolled the whole transaction back during a bulk attempt."""


class _CommandEndedTransaction(Exception):
    def __init__(self, position: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.position = position
        self.error = error


def _rollback(conn: Any) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except Exception:  # the connection may already have rolled back
            log.debug("rollback failed", exc_info=True)


class _OptimisticAttemptFailed(Exception):
    """A handler raised during the optimistic attempt, which was rolled back (the error is the cause)."""


def _run_optimistic(
    conn: Any, commands: Sequence[Command], positions: list[int], outcomes: list[Outcome | None]
) -> None:
    """Apply ``positions`` in one transaction without savepoints; any raise rolls all of it back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for run in _runs(commands, positions):
            if len(run) > 1:
                try:
                    results = BULK_HANDLERS[type(commands[run[0]])](conn, [commands[p] for p in run])
                except Exception as exc:
                    raise _OptimisticAttemptFailed(str(exc)) from exc
                for pos, (ok, value) in zip(run, results):
                    outcomes[pos] = (ok, value if ok else to_stdlib_error(value))
                continue
            pos = run[0]
            try:
                outcomes[pos] = (True, handler_for(commands[pos])(conn, commands[pos]))
            except Exception as exc:
                raise _OptimisticAttemptFailed(str(exc)) from exc
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        for pos in positions:
            outcomes[pos] = None
        raise


def _run_isolated(
    conn: Any, commands: Sequence[Command], positions: list[int], outcomes: list[Outcome | None], bulk: bool = True
) -> None:
    """Apply ``positions`` in one transaction, each command (or bulk run) inside its own savepoint."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for run in _runs(commands, positions):
            if bulk and len(run) > 1 and _try_bulk(conn, commands, run, outcomes):
                continue
            for pos in run:
                _apply_one(conn, commands[pos], pos, outcomes)
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise


def _runs(commands: Sequence[Command], positions: list[int]) -> list[list[int]]:
    """Split positions into runs of consecutive same-type commands that have a bulk handler."""
    runs: list[list[int]] = []
    for pos in positions:
        kind = type(commands[pos])
        if runs and kind in BULK_HANDLERS and type(commands[runs[-1][-1]]) is kind:
            runs[-1].append(pos)
        else:
            runs.append([pos])
    return runs


def _apply_one(conn: Any, command: Command, pos: int, outcomes: list[Outcome | None]) -> None:
    conn.execute("SAVEPOINT hermes_cmd")
    try:
        result = handler_for(command)(conn, command)
    except Exception as exc:
        if _ends_transaction(conn, exc):
            raise _CommandEndedTransaction(pos, exc) from exc
        conn.execute("ROLLBACK TO hermes_cmd")
        conn.execute("RELEASE hermes_cmd")
        outcomes[pos] = (False, to_stdlib_error(exc))
    else:
        conn.execute("RELEASE hermes_cmd")
        outcomes[pos] = (True, result)


def _try_bulk(conn: Any, commands: Sequence[Command], run: list[int], outcomes: list[Outcome | None]) -> bool:
    """Apply a run through its bulk handler; False (and nothing applied) means "one by one"."""
    conn.execute("SAVEPOINT hermes_bulk")
    try:
        results = BULK_HANDLERS[type(commands[run[0]])](conn, [commands[p] for p in run])
    except Exception as exc:
        if not conn.in_transaction:
            raise _BulkEndedTransaction() from exc  # re-run the batch without bulk paths
        conn.execute("ROLLBACK TO hermes_bulk")
        conn.execute("RELEASE hermes_bulk")
        log.debug("bulk path declined (%s); applying %d commands one by one", exc, len(run))
        return False
    conn.execute("RELEASE hermes_bulk")
    for pos, (ok, value) in zip(run, results):
        outcomes[pos] = (ok, value if ok else to_stdlib_error(value))
    return True


def apply_batch(conn: Any, commands: Sequence[Command]) -> list[Outcome]:
    """Apply ``commands`` in order; returns one outcome per command.

    Consecutive ordinary commands share one transaction; a ``standalone``
    command runs on its own between them. Raises only when a transaction as a
    whole cannot start or commit (for example the file is locked by another
    process); then none of the batch's transactional commands were applied.

    A write that fails on a corrupt full-text index (the FTS triggers run in
    the same transaction) is applied again after the index was rebuilt or,
    failing that, detached; see ``search.recovery`` (spec §1.5.4).
    """
    return apply_with_fts_recovery(conn, commands, _apply_batch_once)


def _apply_batch_once(conn: Any, commands: Sequence[Command]) -> list[Outcome]:
    if not any(c.standalone for c in commands):
        return _apply_transaction(conn, commands)
    outcomes: list[Outcome] = []
    group: list[Command] = []
    for command in [*commands, None]:
        if command is not None and not command.standalone:
            group.append(command)
            continue
        if group:
            outcomes.extend(_apply_transaction(conn, group))
            group = []
        if command is not None:
            outcomes.append(_apply_standalone(conn, command))
    return outcomes


def _apply_standalone(conn: Any, command: Command) -> Outcome:
    try:
        return (True, handler_for(command)(conn, command))
    except Exception as exc:
        _rollback(conn)
        return (False, to_stdlib_error(exc))


def _apply_single(conn: Any, command: Command) -> list[Outcome]:
    """One command in its own transaction: what ``_apply_transaction`` does for it, in fewer steps.

    The sequential caller's path (each append awaited before the next), so
    its Python is per commit. A command alone needs no isolation: if it
    raises, the rollback undoes exactly it. BEGIN and COMMIT errors propagate.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = handler_for(command)(conn, command)
    except Exception as exc:
        _rollback(conn)
        return [(False, to_stdlib_error(exc))]
    except BaseException:
        _rollback(conn)
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return [(True, result)]


def _apply_transaction(conn: Any, commands: Sequence[Command]) -> list[Outcome]:
    if len(commands) == 1:
        return _apply_single(conn, commands[0])
    outcomes: list[Outcome | None] = [None] * len(commands)
    positions = list(range(len(commands)))
    try:
        _run_optimistic(conn, commands, positions, outcomes)
        positions = []
    except _OptimisticAttemptFailed as failed:
        # Two commands or more (one alone took _apply_single): isolate them.
        log.debug("optimistic batch of %d failed (%s); re-running with savepoints", len(positions), failed)
    bulk = True
    while positions:
        try:
            _run_isolated(conn, commands, positions, outcomes, bulk)
            break
        except _BulkEndedTransaction:
            bulk = False
        except _CommandEndedTransaction as failed:
            error = to_stdlib_error(failed.error)
            outcomes[failed.position] = (False, error)
            positions = [p for p in positions if p != failed.position]
            if is_malformed_error(error):
                # Damaged pages: nothing more goes into the file until the damage
                # is placed (an FTS index is recovered and the batch re-applied).
                for pos in positions:
                    outcomes[pos] = (False, error)
                break
    return [o if o is not None else (False, RuntimeError("command was not applied")) for o in outcomes]
