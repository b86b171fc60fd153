"""What a search needs to know about the FTS indexes, and the snapshot it reads in.

Which index tables exist, whether their ``rank`` is the default ``bm25()``,
the markers in ``state_meta`` (a detached index, pending backfills) and
whether this connection has the CJK tokenizer. Asked separately that was
four or five statements per search, as much as a zero-hit query costs.

The table set changes only with the schema, so it is cached per connection
(per reader thread: each aiosqlite connection has its own) under the
schema cookie. Each search then runs one statement that reads the cookie,
the markers and the rank settings, plus the first statements of the
search itself (its "arms", see :class:`Arm`), and rebuilds the cache when
the cookie moved.

That statement is also the search's snapshot. It is left open on its
last rows while the search runs whatever else it needs: in autocommit
mode SQLite keeps a read transaction for as long as a statement that
reads is active, so every statement of the search sees the same commit,
as under ``BEGIN ... COMMIT``, without those two statements. Each
statement costs the reader thread a release and a re-take of the GIL,
which under load means waiting for the event loop: a zero-hit search is
now one statement, as its bare FTS5 query is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from .fts_schema import DB_ERRORS, cjk_tokenizer_loaded

__all__ = ["Arm", "FtsState", "SearchSnapshot"]

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




class Arm(NamedTuple):
    """A statement of two result columns the search runs first, to run with the state.

    ``needs`` names the index tables it reads (it is left out when one is
    missing). The second arm may read the first one's rows as ``p1``.
    """

    needs: tuple[str, ...]
    sql: str
    params: Sequence[Any]


# Tags of the held statement's last rows: the search reads up to the
# sentinel; the two rows after it keep the statement (and so the snapshot)
# open, whichever driver buffers one row ahead.
_SENTINEL, _HOLD = 98, 99

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


def _statement(schema: _Schema, arms: Sequence[Arm]) -> tuple[str, int]:
    """(SQL, width) of the held statement: state, then each arm, then the sentinel and holders."""
    width = 2 + len(schema.ranked)  # cookie, markers, one rank count per index table
    pad = ", NULL" * (width - 2)  # arms have two columns
    parts = [f"SELECT 0, {schema.sql[len('SELECT '):]}"]
    prefix = ""
    for number, arm in enumerate(arms, 1):
        if number == 1 and len(arms) > 1:
            prefix = f"WITH p1 AS MATERIALIZED ({arm.sql}) "
            parts.append(f"SELECT 1, *{pad} FROM p1")
        else:
            parts.append(f"SELECT {number}, *{pad} FROM ({arm.sql})")
    nulls = ", NULL" * width
    parts.append(f"SELECT {_SENTINEL}{nulls}")
    parts.append(f"SELECT {_HOLD}{nulls} FROM (VALUES (1), (2))")
    return prefix + " UNION ALL ".join(parts), width


def _params(arms: Sequence[Arm]) -> list[Any]:
    # Bound in the order they appear: the first arm's (in WITH) before the state's when there is a WITH.
    if len(arms) > 1:
        return [*arms[0].params, *_META_KEYS, *(p for arm in arms[1:] for p in arm.params)]
    return [*_META_KEYS, *(p for arm in arms for p in arm.params)]


def _held(conn: Any, schema: _Schema, arms: Sequence[Arm]) -> tuple[Any, Sequence[Any], list[list[Any]]]:
    """(open cursor, state row, rows of each arm) of the held statement."""
    sql, _ = _statement(schema, arms)
    cursor = conn.execute(sql, _params(arms))
    try:
        state: Sequence[Any] = ()
        found: list[list[Any]] = [[] for _ in arms]
        for row in iter(cursor.fetchone, None):
            tag = row[0]
            if tag == _SENTINEL:
                return cursor, state, found
            if tag == 0:
                state = row[1:]
            else:
                found[tag - 1].append(row[1:3])
        raise RuntimeError("the search's held statement ended before its sentinel")  # pragma: no cover
    except BaseException:
        cursor.close()
        raise


def _open(conn: Any, arms: Sequence[Arm]) -> tuple[Any, _Schema, Sequence[Any], frozenset[str], list[list[Any]] | None]:
    """(open cursor, schema, state row, default-rank tables, arm rows or None when they did not run)."""
    schema = _cached(conn)
    for _ in range(3):
        if schema is None:
            schema = _local.schema = _schema(conn)
        usable = [arm for arm in arms if all(t in schema.tables for t in arm.needs)]
        usable = usable if len(usable) == len(arms) else []
        found: list[list[Any]] | None = None
        try:
            if usable:
                try:
                    cursor, row, found = _held(conn, schema, usable)
                except DB_ERRORS as exc:
                    # The arms' own errors (an FTS5 syntax error, a damaged
                    # index) are left for the search's statements to meet.
                    if "interrupt" in str(exc):
                        raise
                    cursor, row, _ = _held(conn, schema, ())
                    found = None
            else:
                cursor, row, _ = _held(conn, schema, ())
        except DB_ERRORS as exc:
            if _cached(conn) is not schema or not schema.ranked or "interrupt" in str(exc):
                raise
            # A dropped or damaged _config table: read the markers alone, and
            # treat every rank as configured (the searches then take the
            # generic statement, which reports the damage if there is any).
            bare = _schema_without_ranks(schema)
            cursor, row, _ = _held(conn, bare, ())
            if row[0] != schema.cookie:
                cursor.close()
                schema = None
                continue
            return cursor, schema, row, frozenset(), None
        if row[0] == schema.cookie:
            default = frozenset(t for t, n in zip(schema.ranked, row[2:]) if not n)
            return cursor, schema, row, default, found
        cursor.close()
        schema = None
    raise RuntimeError("the schema kept changing under a search")  # pragma: no cover - three DDL commits in a row


def _schema_without_ranks(schema: _Schema) -> _Schema:
    sql = f"SELECT schema_version, {_META_SQL} FROM pragma_schema_version"
    return schema._replace(sql=sql, ranked=())


def _state(schema: _Schema, meta_json: Any, default: frozenset[str]) -> FtsState:
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


class SearchSnapshot:
    """``with SearchSnapshot(conn, arms) as (state, rows):`` one commit's view for a whole search.

    ``state`` is the :class:`FtsState`; ``rows`` the rows of each arm, or
    None when they were not run (a table they need is missing, or their
    statement failed: the search runs them again itself and meets the
    error). Statements run inside the block see the same commit.
    """

    __slots__ = ("arms", "conn", "cursor")

    def __init__(self, conn: Any, arms: Sequence[Arm] = ()) -> None:
        self.conn = conn
        self.arms = arms
        self.cursor: Any = None

    def __enter__(self) -> tuple[FtsState, list[list[Any]] | None]:
        self.cursor, schema, row, default, found = _open(self.conn, self.arms)
        return _state(schema, row[1], default), found

    def __exit__(self, *exc: Any) -> None:
        if self.cursor is not None:
            self.cursor.close()  # ends the read transaction
            self.cursor = None
