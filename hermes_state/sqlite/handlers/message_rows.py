"""Message rows to SQLite as one multi-row ``INSERT`` per chunk, never one statement per row.

Every statement that writes ``messages`` pays FTS5's per-statement work for
both indexes (flushing pending terms, merging segments); with one statement
per row that used to be most of a batch's CPU (``bench/append.py`` shows
per-row ``executemany`` at a quarter of the rows/s of these statements). A
multi-row ``VALUES`` list with bound parameters keeps every value's type
exactly as a single-row insert would (bytes stay BLOBs, numbers stay numbers,
NUL-prefixed text stays text) on every SQLite version the store supports.

Two details keep the statements cheap. A column that is NULL in every row of
a chunk is written as a literal ``NULL`` instead of a bound parameter (plain
text rows bind 5 of 20 values). Chunk sizes come from a small fixed set, so
the driver's statement cache holds a few statements per column pattern rather
than one large compiled statement per distinct row count.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from itertools import compress, islice
from operator import attrgetter, is_not, itemgetter
from typing import Any

from ...commands.messages import MessageRow
from ..driver import sqlite_version_info

__all__ = ["MESSAGE_COLUMNS", "chunk_sizes", "insert_message_rows"]

# Insert column order: session_id, then MessageRow's fields up to display_metadata.
MESSAGE_COLUMNS = (
    "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "effect_disposition",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
    "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed", "api_content",
    "display_kind", "display_metadata",
)
_WIDTH = len(MESSAGE_COLUMNS)
_ROW_FIELDS = attrgetter(*MESSAGE_COLUMNS[1:])
_NONES = (None,) * _WIDTH
# The most rows one statement carries; bigger runs take several statements.
MAX_ROWS_PER_STATEMENT = 1000
# Row counts above this are split into the fixed sizes below (cache-friendly).
_EXACT_UP_TO = 64
_SPLIT_SIZES = (512, 256, 128, 64)


@functools.lru_cache(maxsize=1)
def _variable_limit() -> int:
    # SQLITE_MAX_VARIABLE_NUMBER: 32766 by default since SQLite 3.32 (999 before).
    # The stdlib driver can tell (Connection.getlimit, Python 3.11+); pysqlite3
    # cannot, so its build default is assumed.
    from ..driver import driver_module

    mod = driver_module()
    getlimit = getattr(mod.Connection, "getlimit", None)
    if getlimit is not None and hasattr(mod, "SQLITE_LIMIT_VARIABLE_NUMBER"):
        conn = mod.connect(":memory:")
        try:
            return int(conn.getlimit(mod.SQLITE_LIMIT_VARIABLE_NUMBER))
        finally:
            conn.close()
    return 32766 if sqlite_version_info() >= (3, 32, 0) else 999


def chunk_sizes(total: int) -> list[int]:
    """How many rows each statement of a run of ``total`` rows carries, in order.

    No statement binds more values than the SQLite variable limit allows,
    nor carries more than ``MAX_ROWS_PER_STATEMENT`` rows.
    """
    biggest = max(1, min(MAX_ROWS_PER_STATEMENT, _variable_limit() // _WIDTH))
    sizes: list[int] = []
    left = total
    while left > biggest:
        sizes.append(biggest)
        left -= biggest
    if left > _EXACT_UP_TO:
        for size in _SPLIT_SIZES:
            while size < biggest and left >= size and left > _EXACT_UP_TO:
                sizes.append(size)
                left -= size
    if left:
        sizes.append(left)
    return sizes


# Bounded: a 1,000-row statement's text is about 100 KB.
@functools.lru_cache(maxsize=128)
def _insert_sql(bound: tuple[bool, ...], rows: int, returning: bool) -> str:
    one = "(" + ", ".join("?" if b else "NULL" for b in bound) + ")"
    sql = f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES " + ", ".join([one] * rows)
    return sql + " RETURNING id" if returning else sql


def _insert_one(conn: Any, row: tuple[Any, ...], returning: bool) -> list[int]:
    """``_insert_chunk`` of one row (a sequential caller's append), without the per-column walks."""
    bound = tuple(map(is_not, row, _NONES))
    cur = conn.execute(_insert_sql(bound, 1, False), list(compress(row, bound)))
    # Its id is lastrowid (the FTS triggers' inserts do not change it),
    # cheaper than RETURNING, which buffers its result rows.
    return [cur.lastrowid] if returning else []


def _insert_chunk(conn: Any, chunk: Sequence[tuple[Any, ...]], returning: bool) -> list[int]:
    if len(chunk) == 1:
        return _insert_one(conn, chunk[0], returning)
    # Columns that hold a value in some row are bound; the rest are literal NULLs.
    columns = list(zip(*chunk))
    n = len(chunk)
    bound = tuple(col.count(None) != n for col in columns)
    keep = [i for i, b in enumerate(bound) if b]
    if len(keep) == _WIDTH:
        params: list[Any] = [v for r in chunk for v in r]
    else:
        pick = itemgetter(*keep)
        params = [v for r in chunk for v in pick(r)] if len(keep) > 1 else [r[keep[0]] for r in chunk]
    cur = conn.execute(_insert_sql(bound, n, returning), params)
    if not returning:
        return []
    ids = sorted(r[0] for r in cur.fetchall())
    if len(ids) != n:
        raise RuntimeError(f"INSERT ... RETURNING gave {len(ids)} ids for {n} rows")
    return ids


def insert_message_rows(
    conn: Any, rows: Iterable[tuple[str, MessageRow]], total: int, *, returning: bool = False
) -> list[int]:
    """Insert ``total`` ``(session_id, row)`` pairs in order with as few statements as the limits allow.

    Parameters are built one chunk at a time, so a huge batch never holds
    more than one statement's values beside the rows themselves. Returns the
    new row ids in order when ``returning`` is set, else an empty list. Ids
    are read back with ``RETURNING`` and sorted: one statement inserts its
    rows in ``VALUES`` order and ``AUTOINCREMENT`` ids only grow, so the
    sorted ids follow the input.
    """
    if total == 1:  # one append: no chunk bookkeeping
        for session_id, row in rows:
            return _insert_one(conn, (session_id, *_ROW_FIELDS(row)), returning)
        raise ValueError(f"expected {total} message rows, got fewer")
    pairs = iter(rows)
    ids: list[int] = []
    for size in chunk_sizes(total):
        chunk = [(session_id, *_ROW_FIELDS(row)) for session_id, row in islice(pairs, size)]
        if len(chunk) != size:
            raise ValueError(f"expected {total} message rows, got fewer")
        ids.extend(_insert_chunk(conn, chunk, returning))
    return ids
