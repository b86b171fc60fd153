"""Reading a store's rows in copy order and writing them into another store, through the row API.

Order (:data:`hermes_state.tables.CARRIED_TABLES`): the store-wide tables,
every session row (parents first, so a child's link finds its parent), each
session's messages, then the usage ledger. ``copy`` reads it from a store,
``export`` writes it to a file and ``import`` reads it back from one; all
three write through :class:`RowWriter`.

:class:`RowWriter` keeps memory bounded by its :class:`~.transport.Budget`
and is resumable: a row whose key the target holds is skipped, and when it
is the same row (an earlier, interrupted run wrote it) a session's messages
continue after those already there. A row the target holds with other
values is a *conflict*: it is left as it is, reported, and its session's
messages are not touched.

Counters: a session row goes in with ``message_count`` and
``tool_call_count`` at zero, each restore of its messages adds what it
inserts, and once the feeder says the session's messages are all there
(:meth:`RowWriter.finish_session`) one more write sets the source's values.
So at every commit each counter agrees with the rows its session holds
(what ``doctor`` checks), a finished session's counters are the source's,
and a resumed session row is compared without them.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from ..tables import COUNTER_COLUMNS, TABLE_KEYS
from .transport import Budget, parents_first

__all__ = [
    "PAGE", "RowReport", "RowWriter", "differing_columns", "iter_messages", "iter_pages", "key_of", "paged", "session_order",
]

PAGE = 1000
_MISSING = object()


def key_of(table: str, row: dict[str, Any]) -> tuple[Any, ...]:
    """The primary key of ``row`` in ``table``."""
    return tuple(row.get(name) for name in TABLE_KEYS[table])


def same_value(a: Any, b: Any) -> bool:
    """Equal in type and value (1 is not 1.0 nor True; -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
    return bool(a == b)


def differing_columns(a: dict[str, Any], b: dict[str, Any], columns: Sequence[str] | None = None) -> list[str]:
    """The columns (all of both rows, or ``columns``) whose values differ in type or value."""
    names = columns if columns is not None else list(dict.fromkeys([*a, *b]))
    return [name for name in names if not same_value(a.get(name, _MISSING), b.get(name, _MISSING))]


async def paged(
    fetch: Callable[[Any], Awaitable[list[dict[str, Any]]]], cursor: Callable[[dict[str, Any]], Any], page: int
) -> AsyncIterator[list[dict[str, Any]]]:
    """Pages ``fetch(after)`` returns until one is short; ``cursor(last row)`` is the next ``after`` (None first)."""
    after: Any = None
    while True:
        rows = await fetch(after)
        if rows:
            yield rows
        if len(rows) < page:
            return
        after = cursor(rows[-1])


def iter_pages(db: Any, table: str, *, page: int = PAGE, session_id: str | None = None) -> AsyncIterator[list[dict[str, Any]]]:
    """Every row of a keyed table (or of one session), ``page`` rows at a time, in the store's key order."""
    return paged(lambda after: db.dump_rows(table, after=after, limit=page, session_id=session_id),
                 lambda row: key_of(table, row), page)


def iter_messages(db: Any, session_id: str, *, page: int = PAGE) -> AsyncIterator[list[dict[str, Any]]]:
    """Every stored message row of a session, in order, ``page`` rows at a time."""
    return paged(lambda after: db.dump_messages(session_id, after_id=after, limit=page), itemgetter("id"), page)


async def session_order(db: Any, *, ids: set[str] | None = None, source: str | None = None) -> list[str]:
    """The store's session ids (those in ``ids`` / from ``source`` when given), parents first.

    Holds one ``(id, parent)`` pair per session: the only part of a copy
    that grows with the store rather than with a batch.
    """
    pairs: list[tuple[str, str | None]] = []
    async for rows in iter_pages(db, "sessions"):
        pairs += [
            (row["id"], row.get("parent_session_id")) for row in rows
            if (ids is None or row["id"] in ids) and (source is None or row.get("source") == source)
        ]
    return parents_first(pairs)


def _size(row: dict[str, Any]) -> int:
    return 64 + sum(len(v) for v in row.values() if isinstance(v, (str, bytes)))


@dataclass
class RowReport:
    """What a :class:`RowWriter` did, per table."""

    inserted: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # key present with the same values
    conflicts: list[dict[str, Any]] = field(default_factory=list)  # key present with other values: left alone
    conflict_count: int = 0
    detached: list[str] = field(default_factory=list)  # sessions stored without their (absent) parent

    def count(self, into: dict[str, int], table: str, n: int) -> None:
        if n:
            into[table] = into.get(table, 0) + n

    def conflict(self, table: str, key: tuple[Any, ...], problem: str) -> None:
        self.conflict_count += 1
        if len(self.conflicts) < 100:
            self.conflicts.append({"table": table, "key": list(key), "problem": problem})

    def as_dict(self) -> dict[str, Any]:
        """``imported``/``skipped``: sessions written / already there; then the rows of every table."""
        return {"imported": self.inserted.get("sessions", 0), "skipped": self.skipped.get("sessions", 0),
                "inserted": self.inserted, "already_there": self.skipped, "conflicts": self.conflicts,
                "conflict_count": self.conflict_count, "detached": self.detached}


@dataclass
class _Restore:
    """One queued ``restore_messages`` call: a session's rows from ``start`` on, and its final counters if it ends here."""

    session_id: str
    start: int
    rows: list[dict[str, Any]]
    counters: dict[str, Any] | None = None


class RowWriter:
    """Writes rows into ``db`` in bounded ``restore_rows`` / ``restore_messages`` calls; see the module doc."""

    def __init__(self, db: Any, budget: Budget | None = None) -> None:
        self.db = db
        self.budget = budget or Budget()
        self.report = RowReport()
        self._table: str | None = None
        self._rows: list[dict[str, Any]] = []
        self._bytes = 0
        self._blocked: set[str] = set()  # sessions in conflict: their messages are not written
        self._resumed: set[str] = set()  # sessions an earlier run wrote: messages continue after what is there
        self._skip: dict[str, int] = {}  # session -> messages it already holds (resumed sessions, once asked)
        self._held_counters: dict[str, dict[str, Any]] = {}  # resumed session -> the counters the target holds
        self._last_queued: str | None = None  # the session whose messages were queued last
        self._pending: list[_Restore] = []  # restore_messages calls of the next flush
        self._pending_rows = 0
        self._pending_bytes = 0

    # ------------------------------------------------------------ keyed rows

    async def add_row(self, table: str, row: dict[str, Any]) -> None:
        """Queue one row of a keyed table; writes when the batch is full or the table changes.

        The usage rows of a session in conflict stay out with it (they would
        name a session the target does not hold, or add to one it does).
        """
        if table == "session_model_usage" and row.get("session_id") in self._blocked:
            return
        if table == "sessions":  # counted as its messages arrive; finish_session sets the source's values
            row = {**row, **{name: 0 for name in COUNTER_COLUMNS if name in row}}
        if table != self._table:
            await self.flush()
            self._table = table
        self._rows.append(row)
        self._bytes += _size(row)
        limit = self.budget.sessions if table == "sessions" else PAGE
        if len(self._rows) >= limit or self._bytes >= self.budget.bytes:
            await self._flush_rows()

    async def add_rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            await self.add_row(table, row)

    async def _flush_rows(self) -> None:
        table, rows = self._table, self._rows
        self._rows, self._bytes = [], 0
        if table is None or not rows:
            return
        try:
            result = await self.db.restore_rows(table, rows)
        except ValueError:
            if len(rows) == 1 or table != "sessions":
                raise
            # One session of the batch cannot go in (a title another session holds): the others can.
            for row in rows:
                await self._restore_one(table, row)
            return
        await self._settle(table, rows, result)

    async def _restore_one(self, table: str, row: dict[str, Any]) -> None:
        """A session row on its own; one the store refuses is a conflict (its messages stay out)."""
        try:
            result = await self.db.restore_rows(table, [row])
        except ValueError as exc:
            self._blocked.add(row["id"])
            self.report.conflict(table, key_of(table, row), str(exc))
            return
        await self._settle(table, [row], result)

    async def _settle(self, table: str, rows: list[dict[str, Any]], result: dict[str, Any]) -> None:
        """Count what went in; compare each skipped row with the one the target holds."""
        self.report.count(self.report.inserted, table, int(result["inserted"]))
        self.report.detached += result.get("detached") or []
        skipped = [tuple(key) for key in result["skipped"]]
        if not skipped:
            return
        sent = {key_of(table, row): row for row in rows}
        held = {key_of(table, row): row for row in await self.db.find_rows(table, skipped)}
        for key in dict.fromkeys(skipped):
            row, there = sent[key], held.get(key, {})
            compared = [name for name in row if table != "sessions" or name not in COUNTER_COLUMNS]
            columns = differing_columns(row, there, compared)
            if columns:
                self.report.conflict(table, key, f"the target holds this row with other values ({', '.join(columns)})")
                if table == "sessions":
                    self._blocked.add(key[0])
            else:
                self.report.count(self.report.skipped, table, 1)
                if table == "sessions":  # an earlier run's: its counters are where that run stopped
                    self._resumed.add(key[0])
                    self._held_counters[key[0]] = {name: there.get(name) for name in COUNTER_COLUMNS if name in row}

    # -------------------------------------------------------------- messages

    async def _held(self, session_id: str) -> int:
        """How many messages a resumed session already holds (asked once)."""
        if session_id not in self._skip:
            self._skip[session_id] = int(await self.db.message_count(session_id))
        return self._skip[session_id]

    async def wants_messages(self, session_id: str, total: int | None = None) -> bool:
        """False when none of the session's ``total`` messages would be written (a conflict, or all there)."""
        if self._rows:
            await self._flush_rows()  # the session row goes in before its messages
        if session_id in self._blocked:
            return False
        if session_id in self._resumed and total is not None:
            return await self._held(session_id) < total
        return True

    async def add_messages(self, session_id: str, rows: list[dict[str, Any]], start: int) -> None:
        """Queue the session's message rows for positions ``start``... (after its row was added).

        A session's rows arrive in order; one flush carries at most one
        call per session, so the store never sees a later position first.
        """
        if not rows or not await self.wants_messages(session_id):
            return
        if session_id in self._resumed:
            have = await self._held(session_id)
            if start + len(rows) <= have:
                return  # an earlier run wrote these
            rows, start = rows[max(0, have - start):], max(start, have)
        self._last_queued = session_id
        while rows:
            room = max(1, self.budget.messages - self._pending_rows)
            chunk, rows = rows[:room], rows[room:]
            last = self._pending[-1] if self._pending else None
            if last is not None and last.session_id == session_id and last.start + len(last.rows) == start:
                last.rows.extend(chunk)
            else:
                self._pending.append(_Restore(session_id, start, list(chunk)))
            start += len(chunk)
            self._pending_rows += len(chunk)
            self._pending_bytes += sum(_size(row) for row in chunk)
            await self._flush_when_full()

    async def finish_session(self, session_id: str, counters: Mapping[str, Any]) -> None:
        """The session's messages are all queued: its counters become ``counters`` (the source's values).

        The write rides on the session's last queued restore (one
        transaction with its last rows); it is left out for a session in
        conflict, and for one an earlier run finished (nothing of it queued
        now, its counters already the source's).
        """
        wanted = {name: counters[name] for name in COUNTER_COLUMNS if name in counters}
        held = self._held_counters.pop(session_id, None)
        if not wanted or session_id in self._blocked:
            return
        last = self._pending[-1] if self._pending else None
        if last is not None and last.session_id == session_id:
            last.counters = wanted
            return
        if session_id != self._last_queued:  # none of its rows went in now: inserted with zeros, or resumed
            there = held if held is not None else {name: 0 for name in wanted}
            if not differing_columns(wanted, there, list(wanted)):
                return
        if any(call.session_id == session_id for call in self._pending):
            await self._flush_messages()  # its rows first: calls of one flush run side by side
        self._pending.append(_Restore(session_id, 0, [], wanted))
        self._pending_rows += 1
        await self._flush_when_full()

    async def _flush_when_full(self) -> None:
        if self._pending_rows >= self.budget.messages or self._pending_bytes >= self.budget.bytes:
            await self._flush_messages()

    async def _flush_messages(self) -> None:
        pending = self._pending
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        if not pending:
            return
        # Queued together, the calls share one transaction (the store's writer batches them).
        import asyncio  # here: the command's start-up stays light

        counts = await asyncio.gather(*(
            self.db.restore_messages(call.session_id, call.rows, start=call.start, counters=call.counters)
            for call in pending
        ))
        self.report.count(self.report.inserted, "messages", sum(counts))

    async def flush(self) -> None:
        """Write everything queued."""
        await self._flush_rows()
        await self._flush_messages()
