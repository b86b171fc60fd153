"""What a search needs to know about the FTS indexes, in two cheap statements.

Which index tables exist, the markers in ``state_meta`` (a detached index,
pending backfills) and whether this connection has the CJK tokenizer.
Asked separately that was four or five statements per search, as much as
a zero-hit query costs.

The table set changes only with the schema, so it is cached per connection
(per reader thread: each aiosqlite connection has its own) under the
schema cookie; each search reads the cookie (``PRAGMA schema_version``,
which reads the header page a read transaction loads anyway; the
``pragma_schema_version`` table costs a statement compile per run) and then
the markers, and rebuilds the cache when the cookie moved.
A configured ``rank`` needs no check here: the ranked statements order by
the ``rank`` column itself (see ``queries/search.py``). Under writers each
table read is a page read after the commit emptied the page cache, so
every table the state read leaves out is time off every search.
"""

from __future__ import annotations

import json
import threading
from typing import Any, NamedTuple

from .fts_schema import cjk_tokenizer_loaded

__all__ = ["FtsState", "read_state"]

BASE, TRIGRAM, CJK = "messages_fts", "messages_fts_trigram", "messages_fts_cjk"
_META_KEYS = (
    "fts_stale",
    "fts_cjk_stale",
    "fts_rebuild_high_water",
    "fts_rebuild_progress",
    "fts_cjk_rebuild_high_water",
    "fts_cjk_rebuild_progress",
)
# Every marker starts with "fts_" and ends in one of these: one range seek on
# the key index and a filter. "key IN (?, ...)" builds an ephemeral index of
# the list on every run, which made it the dearest part of the statement.
assert all(key.endswith(("_stale", "_high_water", "_progress")) for key in _META_KEYS)
_META_SQL = (
    "(SELECT json_group_object(key, value) FROM state_meta WHERE key >= 'fts_' AND key < 'fts`' "
    "AND (key GLOB '*_stale' OR key GLOB '*_high_water' OR key GLOB '*_progress'))"
)
_MARKERS_SQL = f"SELECT {_META_SQL}"
_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)"


class FtsState(NamedTuple):
    base: bool  # messages_fts exists
    trigram: bool
    cjk: bool  # CJK index built, not stale, tokenizer loaded here
    stale: bool
    gap: tuple[int, int] | None  # (progress, high water) of a pending base backfill


class _Schema(NamedTuple):
    conn: Any
    cookie: int
    tables: frozenset[str]
    cjk_loaded: bool


_local = threading.local()


def _schema(conn: Any) -> _Schema:
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    tables = frozenset(row[0] for row in conn.execute(_TABLES_SQL, (BASE, TRIGRAM, CJK)).fetchall())
    return _Schema(conn, cookie, tables, CJK in tables and cjk_tokenizer_loaded(conn))


def _cached(conn: Any) -> _Schema | None:
    cached: _Schema | None = getattr(_local, "schema", None)
    return cached if cached is not None and cached.conn is conn else None


def _read(conn: Any) -> tuple[_Schema, Any]:
    """(schema, markers as JSON), rebuilding the cache when the schema moved."""
    schema = _cached(conn)
    for _ in range(3):
        if schema is None:
            schema = _local.schema = _schema(conn)
        if conn.execute("PRAGMA schema_version").fetchone()[0] == schema.cookie:
            return schema, conn.execute(_MARKERS_SQL).fetchone()[0]
        schema = None
    raise RuntimeError("the schema kept changing under a search")  # pragma: no cover - three DDL commits in a row


def read_state(conn: Any) -> FtsState:
    """The FTS state seen by ``conn``'s current read transaction."""
    schema, meta_json = _read(conn)
    meta = json.loads(meta_json) if meta_json and meta_json != "{}" else {}
    gap = None
    if meta.get("fts_rebuild_high_water") is not None:
        try:
            high = int(meta["fts_rebuild_high_water"])
            done = int(meta.get("fts_rebuild_progress") or 0)
        except (TypeError, ValueError):
            high = done = 0
        if high > 0:
            gap = (done, high)
    cjk = schema.cjk_loaded and "fts_cjk_stale" not in meta and "fts_cjk_rebuild_high_water" not in meta
    return FtsState(
        base=BASE in schema.tables,
        trigram=TRIGRAM in schema.tables,
        cjk=cjk,
        stale="fts_stale" in meta,
        gap=gap,
    )
