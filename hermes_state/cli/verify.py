"""``verify SOURCE TARGET``: compare two whole stores, table by table, by content (``copy`` runs the same check).

Every keyed table is read page by page from the source, each page's keys
looked up in the target and every column compared (in type and value);
each session present on both sides has its messages compared position by
position (every column but the row id, which each store assigns). A
second pass over the target finds the rows the source does not have.
Memory holds a page of each side and at most :data:`SHOWN` differences.
Any difference: exit 4, each one named by table, session and row.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any, Callable

from ..tables import KEYED_TABLES
from .errors import MISMATCH, OK, CliError
from .output import print_json, progress
from .rows import differing_columns, iter_messages, iter_pages, key_of
from .target import Target, open_store, parse_target, same_store

__all__ = ["Comparison", "add_parser", "compare_stores", "print_comparison"]

SHOWN = 100  # differences kept (and printed) in full; the rest are counted
_PER_SESSION = 3  # differing messages named per session


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add(
        "verify",
        "compare two stores (SQLite files or PostgreSQL URLs) table by table, every row and column; "
        "exit 4 on any difference, naming the table, the session and the row",
    )
    # Not "target": main() sets args.target to what --db names.
    parser.add_argument("first", metavar="SOURCE", help="the store copied from (path or postgresql:// URL)")
    parser.add_argument("second", metavar="TARGET", help="the store copied to")
    parser.add_argument("--allow-extra", action="store_true",
                        help="rows only in TARGET (it held other data too) are counted but not a difference")
    parser.set_defaults(run=run_verify)


class Comparison:
    """The differences found between a source and a target store."""

    def __init__(self, *, allow_extra: bool) -> None:
        self.allow_extra = allow_extra
        self.shown: list[dict[str, Any]] = []
        self.count = 0
        self.rows: dict[str, dict[str, int]] = {}  # table -> {"source": n, "target": n}
        self.extra: dict[str, int] = {}  # rows only in the target, when allowed

    def differ(self, table: str, problem: str, *, session_id: str | None = None, key: Any = None, row: str | None = None) -> None:
        self.count += 1
        if len(self.shown) < SHOWN:
            item: dict[str, Any] = {"table": table}
            if session_id is not None:
                item["session_id"] = session_id
            if key is not None:
                item["key"] = list(key)
            if row is not None:
                item["row"] = row
            item["problem"] = problem
            self.shown.append(item)

    def tally(self, table: str, side: str, n: int) -> None:
        counts = self.rows.setdefault(table, {"source": 0, "target": 0})
        counts[side] += n

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.count == 0, "mismatch_count": self.count, "mismatches": self.shown,
                "rows": self.rows, "only_in_target": self.extra}


def _where(table: str, key: tuple[Any, ...]) -> dict[str, Any]:
    """How a difference names its row: the session for session rows, the key otherwise."""
    if table == "sessions":
        return {"session_id": key[0]}
    if table == "session_model_usage":
        return {"session_id": key[0], "key": key}
    return {"key": key}


async def _rows(pages: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[dict[str, Any]]:
    async for page in pages:
        for row in page:
            yield row


async def _compare_messages(source: Any, target: Any, session_id: str, found: Comparison) -> None:
    """Message by message, in order; names the first differing positions and any difference in number."""
    mine, theirs = _rows(iter_messages(source, session_id)), _rows(iter_messages(target, session_id))
    counts = [0, 0]
    named = 0
    while True:
        a, b = await anext(mine, None), await anext(theirs, None)
        if a is None and b is None:
            break
        counts[0] += a is not None
        counts[1] += b is not None
        if a is None or b is None:
            continue  # count the rest of the longer side
        columns = [c for c in differing_columns(a, b) if c != "id"]
        if not columns:
            continue
        if named < _PER_SESSION:
            found.differ("messages", f"{', '.join(columns)} differ", session_id=session_id,
                         row=f"message #{counts[0]} (source id {a['id']}, target id {b['id']})")
            named += 1
        else:
            found.count += 1
    if counts[0] != counts[1]:
        found.differ("messages", f"the target holds {counts[1]} message(s), the source {counts[0]}", session_id=session_id)
    found.tally("messages", "source", counts[0])
    found.tally("messages", "target", counts[1])


async def _compare_table(source: Any, target: Any, table: str, found: Comparison, bar: Any) -> None:
    mine, theirs = await source.table_columns(table), await target.table_columns(table)
    if mine and theirs and set(mine) != set(theirs):  # a table one side lacks reads as empty
        only = [f"only in the {side}: {', '.join(sorted(set(a) - set(b)))}"
                for side, a, b in (("source", mine, theirs), ("target", theirs, mine)) if set(a) - set(b)]
        found.differ(table, f"the tables have other columns ({'; '.join(only)})")
    shared = [name for name in mine if name in theirs]
    async for page in iter_pages(source, table):
        found.tally(table, "source", len(page))
        held = {key_of(table, row): row for row in await target.find_rows(table, [key_of(table, r) for r in page])}
        for row in page:
            key = key_of(table, row)
            other = held.get(key)
            if other is None:
                found.differ(table, "missing from the target", **_where(table, key))
                continue
            columns = differing_columns(row, other, shared)
            if columns:
                values = "; ".join(f"{c}: source {row.get(c)!r:.60}, target {other.get(c)!r:.60}" for c in columns[:3])
                found.differ(table, f"{', '.join(columns)} differ ({values})", **_where(table, key))
            if table == "sessions":
                await _compare_messages(source, target, key[0], found)
        bar.update(len(page))
    async for page in iter_pages(target, table):
        found.tally(table, "target", len(page))
        present = {key_of(table, row) for row in await source.find_rows(table, [key_of(table, r) for r in page])}
        for row in page:
            key = key_of(table, row)
            if key in present:
                continue
            if found.allow_extra:
                found.extra[table] = found.extra.get(table, 0) + 1
            else:
                found.differ(table, "only in the target", **_where(table, key))
            if table == "sessions":  # its messages are the target's alone
                found.tally("messages", "target", await target.message_count(key[0]))


async def compare_stores(source: Any, target: Any, *, allow_extra: bool = False) -> Comparison:
    """Compare every carried table of two open stores; returns the :class:`Comparison`."""
    found = Comparison(allow_extra=allow_extra)
    bar = progress(None, "verify", unit="row")
    try:
        for table in KEYED_TABLES:
            await _compare_table(source, target, table, found, bar)
    finally:
        bar.close()
    return found


def print_comparison(found: Comparison, *, source: str, target: str) -> None:
    """The comparison for people: one line per difference shown, then a summary."""
    for item in found.shown:
        where = " ".join(
            f"{name}={item[name] if name != 'key' else '/'.join(map(str, item[name]))}"
            for name in ("session_id", "key", "row") if name in item
        )
        print(f"MISMATCH {item['table']}{' ' + where if where else ''}: {item['problem']}")
    if found.count > len(found.shown):
        print(f"... and {found.count - len(found.shown)} more difference(s)")
    total = sum(counts["source"] for counts in found.rows.values())
    extra = sum(found.extra.values())
    note = f"; the target also holds {extra} row(s) the source does not" if extra else ""
    if found.count:
        print(f"verification failed: {found.count} difference(s) between {source} and {target}{note}")
    else:
        print(f"verified {total} row(s) in {len(found.rows)} table(s): {target} holds everything {source} holds{note}")


async def run_verify(args: argparse.Namespace) -> int:
    source_target: Target = parse_target(args.first)
    destination: Target = parse_target(args.second)
    if same_store(source_target, destination):
        raise CliError("SOURCE and TARGET are the same store")
    async with open_store(source_target, read_only=True) as source, open_store(destination, read_only=True) as target:
        found = await compare_stores(source, target, allow_extra=args.allow_extra)
    if args.json:
        print_json({"source": str(source_target), "target": str(destination), **found.as_dict()})
    else:
        print_comparison(found, source=str(source_target), target=str(destination))
    return MISMATCH if found.count else OK
