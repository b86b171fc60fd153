"""What a search needs to know about the FTS indexes, in one statement.

Which index tables exist, whether their ``rank`` is the default ``bm25()``,
the markers in ``state_meta`` (a detached index, pending backfills) and
whether this connection has the CJK tokenizer. Asked separately that was
four or five statements per search, as much as a zero-hit query costs.

The table set changes only with the schema, so it is cached per connection
(per reader thread: each aiosqlite connection has its own) under the
schema cookie; each search then runs one statement that reads the cookie,
the markers and the rank settings together, and rebuilds the cache when
the cookie moved.
"""

from __future__ import annotations

import json
import threading
from typing import Any, NamedTuple

from .fts_schema import DB_ERRORS, cjk_tokenizer_loaded

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
_TABLES_SQL = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)"


class FtsState(NamedTuple):
    base: bool  # messages_fts exists
    trigram: bool
    cjk: bool  # CJK index built, not stale, tokenizer loaded here
    stale: bool
    gap: tuple[int, int] | None  # (progress, high water) of a pending base backfill
    default_rank: frozenset[str]  # index tables whose rank is bm25() with default weights


class _Schema(NamedTuple):
    conn: Any
    cookie: int
    tables: frozenset[str]
    cjk_loaded: bool
    sql: str  # cookie, markers, then one "rank configured" count per table of ``ranked``
    ranked: tuple[str, ...]


_local = threading.local()


def _schema(conn: Any) -> _Schema:
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    tables = frozenset(row[0] for row in conn.execute(_TABLES_SQL, (BASE, TRIGRAM, CJK)).fetchall())
    ranked = tuple(t for t in (BASE, TRIGRAM, CJK) if t in tables)
    counts = "".join(f", (SELECT count(*) FROM {t}_config WHERE k = 'rank')" for t in ranked)
    sql = f"SELECT schema_version, {_META_SQL}{counts} FROM pragma_schema_version"
    return _Schema(conn, cookie, tables, CJK in tables and cjk_tokenizer_loaded(conn), sql, ranked)


def _cached(conn: Any) -> _Schema | None:
    cached: _Schema | None = getattr(_local, "schema", None)
    return cached if cached is not None and cached.conn is conn else None


def _read(conn: Any) -> tuple[_Schema, Any, frozenset[str]]:
    """(schema, markers as JSON, default-rank tables), rebuilding the cache when the schema moved."""
    schema = _cached(conn)
    for _ in range(3):
        if schema is None:
            schema = _local.schema = _schema(conn)
        try:
            row = conn.execute(schema.sql).fetchone()
        except DB_ERRORS:
            if _cached(conn) is not schema or not schema.ranked:
                raise
            # A dropped or damaged _config table: read the markers alone, and
            # treat every rank as configured (the searches then take the
            # generic statement, which reports the damage if there is any).
            row = conn.execute(f"SELECT schema_version, {_META_SQL} FROM pragma_schema_version").fetchone()
            if row[0] != schema.cookie:
                schema = None
                continue
            return schema, row[1], frozenset()
        if row[0] == schema.cookie:
            default = frozenset(t for t, n in zip(schema.ranked, row[2:]) if not n)
            return schema, row[1], default
        schema = None
    raise RuntimeError("the schema kept changing under a search")  # pragma: no cover - three DDL commits in a row


def read_state(conn: Any) -> FtsState:
    """The FTS state seen by ``conn``'s current read transaction."""
    schema, meta_json, default = _read(conn)
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
        default_rank=default,
    )
