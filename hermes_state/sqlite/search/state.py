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
from collections.abc import Sequence
from typing import Any, NamedTuple

from .fts_schema import DB_ERRORS, cjk_tokenizer_loaded

__all__ = ["FtsState", "Probe", "read_state"]

BASE, TRIGRAM, CJK = "messages_fts", "messages_fts_trigram", "messages_fts_cjk"
_META_KEYS = (
    "fts_stale",
    "fts_cjk_stale",
    "fts_rebuild_high_water",
    "fts_rebuild_progress",
    "fts_cjk_rebuild_high_water",
    "fts_cjk_rebuild_progress",
)
_META_SQL = "(SELECT json_group_object(key, value) FROM state_meta WHERE key IN ({}))".format(
    ", ".join("?" * len(_META_KEYS))
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


# A statement of two result columns and its parameters (see read_state).
Probe = tuple[str, Sequence[Any]]

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


def _read(conn: Any, probe: Probe | None) -> tuple[_Schema, Any, frozenset[str], list[Any] | None]:
    """(schema, markers as JSON, default-rank tables, probe rows), rebuilding the cache when the schema moved."""
    schema = _cached(conn)
    for _ in range(3):
        if schema is None:
            schema = _local.schema = _schema(conn)
        rows = None
        if probe is not None and BASE in schema.tables:
            rows = _with_probe(conn, schema, probe)
        if rows is not None:
            row, found = rows[0], rows[1:]
        else:
            found = None
            try:
                row = conn.execute(schema.sql, _META_KEYS).fetchone()
            except DB_ERRORS:
                if _cached(conn) is not schema or not schema.ranked:
                    raise
                # A dropped or damaged _config table: read the markers alone, and
                # treat every rank as configured (the searches then take the
                # generic statement, which reports the damage if there is any).
                row = conn.execute(f"SELECT schema_version, {_META_SQL} FROM pragma_schema_version", _META_KEYS).fetchone()
                if row[0] != schema.cookie:
                    schema = None
                    continue
                return schema, row[1], frozenset(), None
        if row[0] == schema.cookie:
            default = frozenset(t for t, n in zip(schema.ranked, row[2:]) if not n)
            return schema, row[1], default, found
        schema = None
    raise RuntimeError("the schema kept changing under a search")  # pragma: no cover - three DDL commits in a row


def _with_probe(conn: Any, schema: _Schema, probe: Probe) -> list[Any] | None:
    """The state row then the probe's rows, from one statement; None when that statement failed.

    The probe's own errors (an FTS5 syntax error, a damaged index) are left
    for the caller's statement to meet and handle as it always has.
    """
    sql, params = probe
    pad = ", NULL" * len(schema.ranked)  # the probe has two columns, the state 2 + one per index table
    combined = f"SELECT 0, {schema.sql[len('SELECT '):]} UNION ALL SELECT 1, *{pad} FROM ({sql})"
    try:
        rows = conn.execute(combined, (*_META_KEYS, *params)).fetchall()
    except DB_ERRORS as exc:
        if "interrupt" in str(exc):
            raise
        # A damaged index can leave the read transaction unusable (COMMIT
        # then fails too): start a fresh one for the statements that follow.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        return None
    state = [row[1:] for row in rows if row[0] == 0]
    return state + [row[1:3] for row in rows if row[0] == 1] if len(state) == 1 else None


def read_state(conn: Any, probe: Probe | None = None) -> tuple[FtsState, list[Any] | None]:
    """The FTS state seen by ``conn``'s current read transaction, and the rows of ``probe``.

    Call it inside a read transaction (``BEGIN``), as a search does.

    ``probe`` is a statement of two columns on ``messages_fts`` that the
    search will run first whatever the state (the ranked candidates): it
    runs in the same statement as the state, one round trip instead of
    two. Its rows are None when it was not run (no such table, or it
    failed: the caller runs it again itself and meets the error).
    """
    schema, meta_json, default, found = _read(conn, probe)
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
    state = FtsState(
        base=BASE in schema.tables,
        trigram=TRIGRAM in schema.tables,
        cjk=cjk,
        stale="fts_stale" in meta,
        gap=gap,
        default_rank=default,
    )
    return state, found
