"""Writes that meet a corrupt FTS index: rebuild once, else fail open (spec §1.5.4).

The writer hands every batch through :func:`apply_with_fts_recovery`. When a
command (or the batch's COMMIT) fails with an FTS corruption error, the
indexes are first rebuilt in place, once per connection; if that is
impossible or does not help, the FTS triggers are dropped and ``fts_stale``
is recorded, so searches serve a LIKE scan until the next writable open
repairs the indexes. Either way the failed writes are applied again: the
transcript write is what matters, the index can be rebuilt from it.
Damage outside the indexes is not touched here: the backend turns it into
``DatabaseMalformedError`` and stops writing (``hermes_state.sqlite.damage``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..damage import damaged_tables, names_an_index
from ..damage import is_malformed_error as is_fts_corruption_error
from .fts_schema import ALL_TRIGGERS, DB_ERRORS, detach_fts, get_meta, rebuild_in_place

__all__ = ["apply_with_fts_recovery", "is_fts_corruption_error", "recover_fts"]

log = logging.getLogger("hermes_state.sqlite.search")

Outcome = tuple[bool, Any]
# A writer connection retries a corrupt-index write at most this many times
# per batch (one in-place rebuild, then one detach).
MAX_RECOVERIES = 2


def _rebuild_tried(conn: Any) -> bool:
    # Per-connection memory lives in a TEMP table: it exists exactly as long
    # as the connection (one store instance) and needs no Python-side map.
    try:
        return conn.execute("SELECT 1 FROM temp.hermes_fts_recovery LIMIT 1").fetchone() is not None
    except DB_ERRORS:
        return False


def _mark_rebuild_tried(conn: Any) -> None:
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS hermes_fts_recovery(step TEXT PRIMARY KEY)")
    conn.execute("INSERT OR IGNORE INTO temp.hermes_fts_recovery(step) VALUES ('rebuild')")


def _in_own_transaction(conn: Any, action: Callable[[Any], Any]) -> bool:
    try:
        conn.execute("BEGIN IMMEDIATE")
        action(conn)
        conn.execute("COMMIT")
        return True
    except Exception as exc:  # noqa: BLE001 - a failed step is reported by returning False
        log.warning("FTS recovery step failed: %s", exc)
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                log.debug("rollback after FTS recovery failure failed", exc_info=True)
        return False


def recover_fts(conn: Any, errors: Sequence[BaseException] = ()) -> bool:
    """React to FTS corruption ``errors`` on ``conn``; True when a retry of the write may succeed.

    The first time on a connection: rebuild every index in place. After
    that (or when the rebuild fails): detach FTS. When FTS is already
    detached, or the damage lies outside the indexes, the error has another
    cause and False is returned (nothing is written then). The transcript
    tables are checked only when an error does not itself name an index.
    """
    if not (errors and all(names_an_index(e) for e in errors)) and damaged_tables(conn):
        log.error("the database file is damaged outside the FTS indexes; not touching the indexes")
        return False
    if not _rebuild_tried(conn):
        _mark_rebuild_tried(conn)
        if _in_own_transaction(conn, rebuild_in_place):
            log.warning("FTS index corruption met during a write; indexes rebuilt in place")
            return True
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    if get_meta(conn, "fts_stale") is not None and not triggers.intersection(ALL_TRIGGERS):
        return False
    if _in_own_transaction(conn, detach_fts):
        log.error("FTS index unusable; full-text search detached (LIKE fallback) until the next writable open")
        return True
    return False


def apply_with_fts_recovery(
    conn: Any,
    commands: Sequence[Any],
    apply: Callable[[Any, Sequence[Any]], list[Outcome]],
) -> list[Outcome]:
    """Run ``apply(conn, commands)``, recovering from FTS corruption and re-applying what it failed.

    Outcomes keep batch order. Raises only what ``apply`` raises before any
    command committed.
    """
    # The common case, once per commit: no corruption met, the outcomes as they are.
    try:
        results = apply(conn, commands)
    except Exception as exc:
        if not is_fts_corruption_error(exc):
            raise  # nothing committed: the batch fails as a whole
        return _recover_and_reapply(conn, commands, apply, exc)
    if len(results) == len(commands) and all(ok or not is_fts_corruption_error(value) for ok, value in results):
        return results
    return _recover_and_reapply(conn, commands, apply, results)


def _attempt(conn: Any, commands: Sequence[Any], apply: Callable[[Any, Sequence[Any]], list[Outcome]]) -> Any:
    try:
        return apply(conn, commands)
    except Exception as exc:
        return exc


def _recover_and_reapply(
    conn: Any,
    commands: Sequence[Any],
    apply: Callable[[Any, Sequence[Any]], list[Outcome]],
    first: list[Outcome] | Exception,
) -> list[Outcome]:
    """The rest of :func:`apply_with_fts_recovery` once the first attempt (``first``) met corruption."""
    outcomes: list[Outcome | None] = [None] * len(commands)
    pending = list(range(len(commands)))
    recoveries = 0
    attempt = first
    while True:
        if isinstance(attempt, Exception):
            exc = attempt
            if recoveries < MAX_RECOVERIES and is_fts_corruption_error(exc) and recover_fts(conn, [exc]):
                recoveries += 1
                attempt = _attempt(conn, [commands[i] for i in pending], apply)
                continue
            if len(pending) == len(commands):
                raise exc  # nothing committed: the batch fails as a whole, as before
            for i in pending:
                outcomes[i] = (False, exc)
            break
        retry, errors = [], []
        for i, outcome in zip(pending, attempt):
            outcomes[i] = outcome
            if not outcome[0] and is_fts_corruption_error(outcome[1]):
                retry.append(i)
                errors.append(outcome[1])
        if not retry or recoveries >= MAX_RECOVERIES or not recover_fts(conn, errors):
            break
        recoveries += 1
        pending = retry
        attempt = _attempt(conn, [commands[i] for i in pending], apply)
    return [o if o is not None else (False, RuntimeError("command was not applied")) for o in outcomes]
