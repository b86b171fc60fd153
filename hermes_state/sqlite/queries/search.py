"""Read side of search: ``search_messages`` routing, session search, FTS status.

``search_messages`` runs entirely on the reader thread inside one read
transaction: it reads the FTS state (markers, which indexes exist), picks a
route (spec §4.3), runs it, applies the fallbacks, and builds snippets and
context windows for the page it returns. A corrupt index is reported to the
facade with :class:`FtsRepairNeeded` so the repair can go through the writer.
"""

from __future__ import annotations

import functools
import logging
import sqlite3
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from ...errors import FtsRepairNeeded
from ...limits import INT64_MAX
from ...previews import structured_text
from ..driver import driver_module
from ..search.fts_schema import (
    DB_ERRORS,
    cjk_tokenizer_loaded,
    fts_layout,
    get_meta,
    index_empty_with_messages,
    trash_tables,
)
from ..search.recovery import is_fts_corruption_error
from ...search_text.sanitize import (
    BooleanGroup,
    boolean_groups,
    contains_cjk,
    count_cjk,
    gap_terms,
    has_lone_cjk_run,
    like_pattern,
    searchable,
    literal_prefilter,
    plain_tokens,
    quote_for_substring_index,
    trigram_eligible,
)
from ..search.context import WINDOW_COLUMN_COUNT, clipped, column, contexts, unclip, window, window_columns
from ..search.state import FtsState, read_state
from ...search_text.snippet import (
    MAX_FTS5_SNIPPET_HITS,
    bounded_snippet,
    hits_exceed,
    literal_snippet,
    phrase_pattern,
    query_phrases,
)
from .core import fetch_dicts, resolve_prompt, snapshot
from .registry import query, search_query

__all__ = [
    "FtsRepairNeeded",
    "fts_layout_name",
    "fts_markers",
    "fts_optimize_pending",
    "fts_storage_unsettled",
    "count_search_rows",
    "is_fts_corruption_error",
    "search_messages_rows",
    "search_sessions_rows",
    "session_ids_matching",
]

log = logging.getLogger("hermes_state.search")

_SNIPPET = "snippet({t}, -1, '>>>', '<<<', '...', 40)"


def _is_db_error(exc: BaseException) -> bool:
    return isinstance(exc, (sqlite3.DatabaseError, driver_module().DatabaseError))


def _is_operational(exc: BaseException) -> bool:
    return isinstance(exc, (sqlite3.OperationalError, driver_module().OperationalError))


# --------------------------------------------------------------------- search


class _Search(NamedTuple):
    query: str  # sanitized
    sources: tuple[str, ...] | None
    excluded: tuple[str, ...] | None
    roles: tuple[str, ...] | None
    limit: int
    offset: int
    sort: str | None  # "newest", "oldest" or None (rank)
    include_inactive: bool
    repairable: bool
    with_snippet: bool
    with_context: bool
    # The user's text as literal substring groups, when word search cannot find it as typed.
    literal: tuple[BooleanGroup, ...] | None = None

    @property
    def wants_tool_rows(self) -> bool:
        return self.roles is not None and "tool" in self.roles

    def filters(self) -> tuple[list[str], list[Any]]:
        """WHERE clauses (on ``m`` and ``s``) shared by every route, with their parameters."""
        where: list[str] = []
        params: list[Any] = []
        if not self.include_inactive:
            where.append("(m.active = 1 OR m.compacted = 1)")
        if self.sources is not None:
            where.append(f"s.source IN ({', '.join('?' * len(self.sources))})")
            params.extend(self.sources)
        if self.excluded:
            where.append(f"s.source NOT IN ({', '.join('?' * len(self.excluded))})")
            params.extend(self.excluded)
        if self.roles:
            where.append(f"m.role IN ({', '.join('?' * len(self.roles))})")
            params.extend(self.roles)
        return where, params


def _unclip_rows(conn: Any, rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Rows of ``_INDEX_HIT_COLUMNS`` in the ``_HIT_COLUMNS`` layout, plus whether the content was cut."""
    out = []
    for row in rows:
        content, cut = unclip(conn, row[0], row[3], row[4])
        out.append([*row[:3], content, *row[5:], cut])
    return out


_HIT_COLUMNS = (
    "m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, "
    "s.source, s.model, s.started_at AS session_started, length(m.tool_calls)"
)
# The same, content cut (LIKE routes read it whole: their snippet may lie anywhere).
_INDEX_HIT_COLUMNS = _HIT_COLUMNS.replace("m.content", clipped("m.content"), 1)




def _hit(row: Sequence[Any], snippet: Any) -> dict[str, Any]:
    return {
        "id": row[0],
        "session_id": row[1],
        "role": row[2],
        "snippet": _text(snippet),
        "timestamp": row[4],
        "tool_name": row[5],
        "source": row[6],
        "model": row[7],
        "session_started": row[8],
        "content": row[3],
    }


def _text(value: Any) -> Any:
    # Snippets are selected as BLOBs so stored bytes that are not UTF-8 can
    # never make the driver raise; decode them leniently here.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return value


# First batch of best-ranked candidates fetched when only the visibility
# filter applies; one retry with eight times as many, then a joined scan.
_CANDIDATES = 64
_CANDIDATE_GROWTH = 8
# Ids bound into one statement (SQLite 3.40 allows 32,766 variables).
_IDS_PER_STATEMENT = 500


# A row this short cannot hold enough hits to make snippet() slow.
_SHORT_ROW_CHARS = 2 * MAX_FTS5_SNIPPET_HITS


def _lenient(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _bounded_snippets(conn: Any, table: str, match: str, rows: Sequence[Sequence[Any]]) -> dict[int, Any]:
    """Our own snippets for the rows with too many hits for snippet(); the others are left out."""
    long_rows = [
        row for row in rows if (len(row[3]) if isinstance(row[3], (str, bytes)) else 0) + (row[9] or 0) > _SHORT_ROW_CHARS
    ]
    substring = table != "messages_fts"
    pattern = phrase_pattern(match, substring) if long_rows else None
    if pattern is None:
        return {}
    found: dict[int, Any] = {}
    for row in long_rows:
        content = row[3]
        tool_calls = row[9] and column(conn, "tool_calls", row[0])
        texts = [_lenient(content), _lenient(row[5]), _lenient(tool_calls)]
        many = hits_exceed(pattern, texts)
        if not many and row[10]:  # few hits in the part read: count them all
            texts[0] = _lenient(column(conn, "content", row[0]))
            many = hits_exceed(pattern, texts)
        if many:
            found[row[0]] = next(
                (text for text in (bounded_snippet(t, pattern, substring) for t in texts) if text is not None), None
            )
    return found


def _snippets(conn: Any, table: str, match: str, rows: Sequence[Sequence[Any]]) -> dict[int, Any]:
    """Snippets of ``rows`` for ``match``: our bounded snippet for rows with many hits, and
    snippet() for the others in one unscored pass over the matches in the rows' id range.

    A probe per row would re-run the MATCH once per row instead of once.
    """
    found = _bounded_snippets(conn, table, match, rows)
    ids = [row[0] for row in rows if row[0] not in found]
    snippet = f"CAST({_SNIPPET.format(t=table)} AS BLOB)"
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        chunk = ids[start : start + _IDS_PER_STATEMENT]
        # "rowid + 0" keeps SQLite from turning the IN list into one probe per value.
        found.update(
            conn.execute(
                f"SELECT rowid, {snippet} FROM {table} WHERE {table} MATCH ? AND rowid BETWEEN ? AND ? "
                f"AND (rowid + 0) IN ({', '.join('?' * len(chunk))})",
                (match, min(chunk), max(chunk), *chunk),
            ).fetchall()
        )
    return found


def _inline_snippet(table: str) -> str:
    """snippet() for a row short enough that it cannot be slow, else NULL (the caller decides)."""
    size = (
        "(SELECT length(x.content) + coalesce(length(x.tool_calls), 0) "
        f"FROM messages AS x WHERE x.id = {table}.rowid)"
    )
    return f"CASE WHEN {size} <= {_SHORT_ROW_CHARS} THEN CAST({_SNIPPET.format(t=table)} AS BLOB) END"


def _snippets_inline(req: _Search, table: str, match: str) -> bool:
    """Whether the ranked statement should build the snippets itself.

    Yes where evaluating the MATCH is the dear part (a substring index's
    phrases over many trigrams, several terms to intersect): a second pass
    would cost as much again. No for one term or phrase, where scoring
    dominates: ``bm25()`` with a LIMIT, then one unscored pass, is cheaper.
    """
    return req.with_snippet and (table != "messages_fts" or _phrase_count(match) > 1)


@functools.lru_cache(maxsize=256)
def _phrase_count(match: str) -> int:
    return len(query_phrases(match))


@functools.lru_cache(maxsize=64)
def _ranked_sql(table: str, inline: bool, count: int) -> str:
    """The ranked statement of :func:`_ranked_ids`.

    ``ORDER BY +rank, rowid`` with a LIMIT: the unary plus keeps FTS5 from
    taking the ORDER BY (its own ``ORDER BY rank`` materialises and sorts
    every match), so SQLite keeps just the best rows while scoring, and the
    ``rank`` column is whatever rank the table is configured with (plain
    ``bm25()`` unless someone set another): no need to look the setting up.

    FTS5's ``ORDER BY rank`` reads the LIMIT's value while planning (the
    sorter keeps only that many rows), so SQLite recompiles such a statement
    whenever its bound LIMIT is bound again: on every run. The count is part
    of that statement's text instead; the other form takes it bound.
    """
    if not inline:
        return f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY +rank, rowid LIMIT ?"
    return f"SELECT rowid, {_inline_snippet(table)} FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT {int(count)}"


def _ranked_ids(conn: Any, table: str, match: str, count: int, inline: bool) -> tuple[list[int], dict[int, Any]]:
    """The ``count`` best-ranked ids, with snippets when the statement can build them cheaply.

    Snippets are built afterwards for the page only, except where that is
    dear (see :func:`_snippets_inline`): then the statement is FTS5's
    ``ORDER BY rank``, which builds each snippet for the rows it returns
    only, in the same pass.
    """
    if not inline:
        rows = conn.execute(_ranked_sql(table, False, 0), (match, count)).fetchall()
        return [r[0] for r in rows], {}
    rows = conn.execute(_ranked_sql(table, True, count), (match,)).fetchall()
    return [r[0] for r in rows], {r[0]: r[1] for r in rows if r[1] is not None}


_WINDOW_SELECT, _WINDOW_JOINS = window_columns("m.session_id", "m.timestamp", "m.id")


def _visible_rows(
    conn: Any, ids: Sequence[int], where: list[str], params: list[Any], windows: dict[int, Any] | None = None
) -> dict[int, Sequence[Any]]:
    """Hit rows of ``ids`` that pass the request's filters, by id.

    With ``windows``, the same statement looks up each row's neighbours and
    their context windows go there (one statement instead of two).
    """
    if windows is not None:
        try:
            return _visible_rows_in(conn, ids, where, params, windows)
        except DB_ERRORS as exc:  # the context is a courtesy: the rows alone, windows later or never
            if _is_operational(exc) and "interrupt" in str(exc):
                raise
            log.debug("search context failed: %s", exc)
            windows.clear()
    return _visible_rows_in(conn, ids, where, params, None)


def _visible_rows_in(
    conn: Any, ids: Sequence[int], where: list[str], params: list[Any], windows: dict[int, Any] | None
) -> dict[int, Sequence[Any]]:
    found: dict[int, Sequence[Any]] = {}
    extra = f", {_WINDOW_SELECT}" if windows is not None else ""
    joins = f" {_WINDOW_JOINS}" if windows is not None else ""
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        chunk = ids[start : start + _IDS_PER_STATEMENT]
        clauses = " AND ".join([f"m.id IN ({', '.join('?' * len(chunk))})", *where])
        rows = conn.execute(
            f"SELECT {_INDEX_HIT_COLUMNS}{extra} FROM messages AS m JOIN sessions AS s ON s.id = m.session_id"
            f"{joins} WHERE {clauses}",
            [*chunk, *params],
        ).fetchall()
        if windows is not None:
            neighbours = [row[-WINDOW_COLUMN_COUNT:] for row in rows]
            rows = _unclip_rows(conn, [row[:-WINDOW_COLUMN_COUNT] for row in rows])
            for row, around in zip(rows, neighbours):
                windows[row[0]] = window(conn, row[2], row[3], around)
        else:
            rows = _unclip_rows(conn, rows)
        found.update((row[0], row) for row in rows)
    return found


def _ranked_candidates(
    conn: Any, req: _Search, table: str, match: str, windows: dict[int, Any]
) -> tuple[list[Sequence[Any]], dict[int, Any]] | None:
    """The requested page by relevance (and any snippets built on the way), joining only the winners.

    Only the visibility filter may drop rows here; if too many of the best
    rows are hidden, None asks for the joined scan. The page's context
    windows, when wanted, come with its rows into ``windows``.
    """
    need = min(req.limit + req.offset, INT64_MAX // 2)  # both may be up to 2**63 - 1
    where, params = req.filters()
    inline = _snippets_inline(req, table, match)
    # Inline snippets are built for every candidate: fetch just the page first.
    count = need if inline else max(_CANDIDATES, 2 * need)
    for _ in range(2):
        ids, snippets = _ranked_ids(conn, table, match, count, inline)
        if not ids:
            return [], {}
        # Join the page's ids first; the spare candidates only when some were hidden.
        by_id = _visible_rows(conn, ids[:need], where, params, windows if req.with_context else None)
        if len(by_id) < min(need, len(ids)):
            by_id.update(_visible_rows(conn, ids[need:], where, params))
        ordered = [by_id[i] for i in ids if i in by_id]
        if len(ordered) >= need or len(ids) < count:
            return ordered[req.offset : need], snippets
        count *= _CANDIDATE_GROWTH
    return None


def _index_hits(conn: Any, req: _Search, table: str, match: str) -> list[dict[str, Any]]:
    """Run ``match`` against FTS table ``table`` with the request's filters, order and page."""
    by_rank = req.sort not in ("newest", "oldest")
    rows: Sequence[Sequence[Any]] | None = None
    snippets: dict[int, Any] = {}
    windows: dict[int, Any] = {}
    if by_rank and not (req.sources is not None or req.excluded or req.roles):
        ranked = _ranked_candidates(conn, req, table, match, windows)
        if ranked is not None:
            rows, snippets = ranked
    if rows is None:
        where, params = req.filters()
        where.insert(0, f"{table} MATCH ?")
        params.insert(0, match)
        if by_rank:
            # Selective filters: let FTS5 stream in rank order and join as it goes.
            order = "ORDER BY rank"
        else:
            order = f"ORDER BY m.timestamp {'DESC' if req.sort == 'newest' else 'ASC'}, rank"
        sql = (
            f"SELECT {_INDEX_HIT_COLUMNS} FROM {table} "
            f"JOIN messages AS m ON m.id = {table}.rowid JOIN sessions AS s ON s.id = m.session_id "
            f"WHERE {' AND '.join(where)} {order} LIMIT ? OFFSET ?"
        )
        rows = _unclip_rows(conn, conn.execute(sql, [*params, req.limit, req.offset]).fetchall())
    if req.with_snippet and rows:  # zero hits: no snippet work at all
        snippets.update(_snippets(conn, table, match, [row for row in rows if row[0] not in snippets]))
    hits = [_hit(row, snippets.get(row[0])) for row in rows]
    for hit in hits:
        if hit["id"] in windows:
            hit["context"] = windows[hit["id"]]
    return hits


def _like_snippet(content: Any, term: str) -> Any:
    # substr(content, max(1, instr(content, term) - 40), 120), computed for
    # the returned rows only.
    if content is None:
        return None
    content = _lenient(content)
    at = content.find(term) if term else -1
    start = max(0, at - 40) if at >= 0 else 0
    return content[start : start + 120]


def _term_match_sql(negate: bool = False, encoded: bool = False) -> str:
    cols = ("m.content", "m.tool_name", "m.tool_calls")
    tests = [f"COALESCE({c}, '') LIKE ? ESCAPE '\\'" for c in cols]
    if encoded:
        # LIKE reads text only up to a NUL, so it sees nothing of structured content
        # ("\x00json:..."); instr reads all of it (lower(): LIKE's ASCII-only case folding).
        tests.insert(1, "COALESCE(m.content < char(1) AND instr(lower(m.content), ?) > 0, 0)")
    expr = "(" + " OR ".join(tests) + ")"
    return f"NOT {expr}" if negate else expr


def _ascii_lower(text: str) -> str:
    return "".join(ch.lower() if ch.isascii() else ch for ch in text)


def _combine(parts: list[str], op: str) -> str:
    # A balanced tree keeps SQLite's expression depth logarithmic: a flat
    # chain of a thousand terms would exceed its maximum depth of 1000.
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return f"({_combine(parts[:middle], op)} {op} {_combine(parts[middle:], op)})"


def _distinct(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


# The rows a literal match reads: every message, or (with its MATCH first) those word search found.
_ALL_ROWS = "messages AS m"
_WORD_ROWS = "messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"


def _like_rows(
    conn: Any,
    req: _Search,
    match_sql: str,
    match_params: list[Any],
    order: str,
    limit: int,
    offset: int,
    rows: str = _ALL_ROWS,
) -> list[Any]:
    where, params = req.filters()
    where.insert(0, match_sql)
    sql = (
        f"SELECT {_HIT_COLUMNS} FROM {rows} JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ? OFFSET ?"
    )
    return conn.execute(sql, [*match_params, *params, limit, offset]).fetchall()


def _like_hits(
    conn: Any,
    req: _Search,
    match_sql: str,
    match_params: list[Any],
    snippet_term: str,
    order: str,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    rows = _like_rows(conn, req, match_sql, match_params, order, limit, offset)
    return [_hit(row, _like_snippet(row[3], snippet_term) if req.with_snippet else None) for row in rows]


def _cjk_like_sql(raw: str) -> tuple[str, list[Any], str]:
    """(condition, parameters, first token) of the CJK LIKE route: any token occurs literally."""
    tokens = _distinct(plain_tokens(raw) or [raw])
    params = [like_pattern(tok) for tok in tokens for _ in range(3)]
    return _combine([_term_match_sql()] * len(tokens), "OR"), params, tokens[0]


def _cjk_like(conn: Any, req: _Search, raw: str) -> list[dict[str, Any]]:
    """CJK substring fallback: any token occurs literally (spec §4.3 step 3)."""
    match, params, first = _cjk_like_sql(raw)
    return _like_hits(conn, req, match, params, first, "m.timestamp DESC", req.limit, req.offset)


def _groups_sql(groups: Sequence[BooleanGroup], encoded: bool = False) -> tuple[str, list[Any]]:
    """(condition, parameters): some group has all its positive terms and none of its negative
    ones as substrings of content, tool_name or tool_calls (LIKE: ASCII case-insensitive).

    ``encoded``: structured content's stored text is searched too (as on PostgreSQL).
    """
    clauses: list[str] = []
    params: list[Any] = []
    for group in groups:
        positive, negative = _distinct(group.positive), _distinct(group.negative)
        parts = [_term_match_sql(False, encoded)] * len(positive) + [_term_match_sql(True, encoded)] * len(negative)
        for term in positive + negative:
            pattern = like_pattern(term)
            params.extend([pattern, _ascii_lower(term), pattern, pattern] if encoded else [pattern] * 3)
        clauses.append(_combine(parts, "AND"))
    return _combine(clauses, "OR"), params


def _time_order(req: _Search) -> str:
    direction = "ASC" if req.sort == "oldest" else "DESC"
    return f"m.timestamp {direction}, m.id {direction}"


def _stale_groups(req: _Search) -> Sequence[BooleanGroup]:
    return req.literal or boolean_groups(req.query)


def _stale_like(conn: Any, req: _Search) -> list[dict[str, Any]]:
    """Boolean LIKE scan served while the FTS index is detached (spec §4.6)."""
    groups = _stale_groups(req)
    if not groups:
        return []
    match, params = _groups_sql(groups)
    return _like_hits(conn, req, match, params, groups[0].positive[0], _time_order(req), req.limit, req.offset)


def _literal_sql(req: _Search, words: str | None) -> tuple[str, list[Any], str, str]:
    """(condition, parameters, rows read, order) of the literal match; ``words``: an FTS5 query
    every row holding the literal text matches (only its hits are read), or None (every row).

    Without a ``sort``, the most recently stored rows first: in rowid order the scan stops
    once the page is full (no index has the timestamp order, which sorts every match).
    """
    assert req.literal
    match, params = _groups_sql(req.literal, encoded=True)
    sorted_by_time = req.sort in ("newest", "oldest")
    if words is not None:
        order = _time_order(req) if sorted_by_time else "messages_fts.rowid DESC"
        return f"messages_fts MATCH ? AND {match}", [words, *params], _WORD_ROWS, order
    return match, params, _ALL_ROWS, _time_order(req) if sorted_by_time else "m.id DESC"


def _prefilter(req: _Search, state: FtsState) -> str | None:
    """The word query that narrows the literal match to candidates (None: read every row).

    Not while a backfill is pending: rows past its progress are not in the word index yet.
    """
    return literal_prefilter(req.literal) if req.literal and state.gap is None else None


def _literal_among_words(conn: Any, req: _Search) -> list[dict[str, Any]] | None:
    """The literal hits of a query word search answers loosely (``c++`` as ``c``, ``TODO: fix``), or
    None when there are none (or FTS5 rejects the query): then word search's own hits stand.

    Text that holds a literal term also holds the words the sanitizer made of it, so the
    literal match runs over word search's hits only, not over every row.
    """
    if not req.literal or not req.query:
        return None
    try:
        match, params, rows, order = _literal_sql(req, req.query)
        # Whether this route answers must not depend on the page asked for.
        if req.offset and not _like_rows(conn, req, match, params, order, 1, 0, rows):
            return None
        hits = _literal_hits(conn, req, req.query)
    except Exception as exc:
        if not _is_operational(exc) or is_fts_corruption_error(exc):
            raise
        return None
    return None if not hits and not req.offset else hits


def _literal_hits(conn: Any, req: _Search, words: str | None) -> list[dict[str, Any]]:
    """What word search cannot find as typed (``C#``, ``status=502``, a URL): every term a
    literal substring (OR/NOT kept), tool rows included, most recently stored first (or in
    the time order ``sort`` asks for). ``words``: see :func:`_literal_sql`. Hits are marked in the snippet.
    """
    if not req.literal:
        return []
    match, params, among, order = _literal_sql(req, words)
    try:
        rows = _like_rows(conn, req, match, params, order, req.limit, req.offset, among)
    except Exception as exc:
        if words is None or words == req.query or not _is_db_error(exc):
            raise
        if req.repairable and is_fts_corruption_error(exc):
            raise FtsRepairNeeded(str(exc)) from None
        log.debug("literal search through the word index failed (%s); scanning", exc)
        return _literal_hits(conn, req, None)
    terms = [term for group in req.literal for term in group.positive]
    hits = []
    for row in rows:
        snippet = None
        if req.with_snippet:
            content = _lenient(row[3])
            texts = [structured_text(content) or "", content, _lenient(row[5])]
            if row[9]:
                texts.append(_lenient(column(conn, "tool_calls", row[0])))
            snippet = literal_snippet(texts, terms)
        hits.append(_hit(row, snippet))
    return hits


def _gap_hits(conn: Any, req: _Search, gap: tuple[int, int], wanted: int) -> list[dict[str, Any]]:
    """Rows of a pending backfill that hold every term (not yet in the index)."""
    terms = _distinct(gap_terms(req.query))
    if not terms or wanted <= 0:
        return []
    params: list[Any] = [gap[0], gap[1], *(like_pattern(term) for term in terms for _ in range(3))]
    match = "m.id > ? AND m.id <= ? AND " + _combine([_term_match_sql()] * len(terms), "AND")
    return _like_hits(conn, req, match, params, terms[0], "m.timestamp DESC", wanted, 0)


def _substring_index(conn: Any, req: _Search, table: str, raw: str) -> list[dict[str, Any]] | None:
    """Search the trigram or CJK index; None when it failed (the caller falls back)."""
    try:
        return _index_hits(conn, req, table, quote_for_substring_index(raw))
    except Exception as exc:
        if not _is_db_error(exc):
            raise
        if req.repairable and is_fts_corruption_error(exc):
            raise FtsRepairNeeded(str(exc)) from None
        log.debug("%s search failed (%s); falling back", table, exc)
        return None


def _base_index(conn: Any, req: _Search) -> list[dict[str, Any]] | None:
    """Search ``messages_fts``; None means an FTS5 syntax error (the result is then ``[]``)."""
    try:
        return _index_hits(conn, req, "messages_fts", req.query)
    except Exception as exc:
        if not _is_db_error(exc):
            raise
        if _is_operational(exc) and not is_fts_corruption_error(exc):
            return None
        if req.repairable:
            raise FtsRepairNeeded(str(exc)) from None
        raise


def _route(conn: Any, req: _Search, state: FtsState) -> tuple[str, list[dict[str, Any]]]:
    """Pick and run the route for ``req``; returns (route name, hits)."""
    if state.stale:
        return "like_scan_fts_stale", _stale_like(conn, req)
    if not state.base:
        return "empty", []
    if not req.query:  # nothing left for word search (":)", "()"): only the literal match can answer
        return "literal", _literal_hits(conn, req, _prefilter(req, state))
    used_like = False
    if contains_cjk(req.query):
        raw = req.query.strip('"').strip()
        hits: list[dict[str, Any]] | None = None
        route = "like_scan"
        if state.cjk and not req.wants_tool_rows and not has_lone_cjk_run(raw):
            hits, route = _substring_index(conn, req, "messages_fts_cjk", raw), "fts_cjk"
        if hits is None:
            cjk_tokens = [tok for tok in plain_tokens(raw) if contains_cjk(tok)]
            if (
                count_cjk(raw) >= 3
                and all(count_cjk(tok) >= 3 for tok in cjk_tokens)
                and state.trigram
                and not req.wants_tool_rows
            ):
                hits, route = _substring_index(conn, req, "messages_fts_trigram", raw), "trigram"
        if hits is None:
            hits, route, used_like = _cjk_like(conn, req, raw), "like_scan", True
    else:
        precise = _literal_among_words(conn, req)
        if precise is not None:
            return "literal", precise
        base = _base_index(conn, req)
        if base is None:  # FTS5 rejected the query ("C#", "status=502"): typed as stored, it is found literally
            literal = _literal_hits(conn, req, _prefilter(req, state))
            return ("literal" if literal else "fts5"), literal
        hits, route = base, "fts5"
    if state.gap is not None and not used_like and len(hits) < req.limit:
        seen = {hit["id"] for hit in hits}
        hits.extend(hit for hit in _gap_hits(conn, req, state.gap, req.limit - len(hits)) if hit["id"] not in seen)
    if not hits and route == "fts5" and not req.wants_tool_rows:
        hits, route = _zero_hit_fallback(conn, req, state)
    if not hits and route == "fts5" and req.literal:
        hits = _literal_hits(conn, req, _prefilter(req, state))
        route = "literal" if hits else route
    return route, hits


def _zero_hit_fallback(conn: Any, req: _Search, state: FtsState) -> tuple[list[dict[str, Any]], str]:
    # Substring indexes find what word tokenization cannot ("cker" in "docker").
    raw = req.query.strip('"').strip()
    if state.cjk:
        hits = _substring_index(conn, req, "messages_fts_cjk", raw)
        if hits:
            return hits, "fts_cjk"
    if state.trigram and trigram_eligible(req.query):
        hits = _substring_index(conn, req, "messages_fts_trigram", raw)
        if hits:
            return hits, "trigram"
    return [], "fts5"


def _request(
    text: str,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
    roles: tuple[str, ...] | None,
    limit: int,
    offset: int,
    sort: str | None,
    include_inactive: bool,
    repairable: bool,
    with_snippet: bool,
    with_context: bool,
) -> _Search | None:
    """The request for ``text``, or None when it can find nothing (blank text, ``limit`` 0, no source)."""
    planned = searchable(text, limit, sources)
    if planned is None:
        return None
    sanitized, literal = planned
    return _Search(
        sanitized, sources, excluded, roles, limit, offset, sort, include_inactive, repairable, with_snippet,
        with_context, literal,
    )


def _count_where(conn: Any, req: _Search, sql_from: str, match: str, params: list[Any], cap: int) -> int:
    where, filter_params = req.filters()
    sql = (
        f"SELECT count(*) FROM (SELECT 1 FROM {sql_from} JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE {' AND '.join([match, *where])} LIMIT ?)"
    )
    return int(conn.execute(sql, [*params, *filter_params, cap]).fetchone()[0])


def _count_route(conn: Any, req: _Search, state: FtsState, route: str, cap: int) -> int:
    """Messages ``route`` matches for ``req`` over all pages, counted up to ``cap``."""
    raw = req.query.strip('"').strip()
    like_from = "messages AS m"
    if route in ("fts5", "trigram", "fts_cjk"):
        table = {"fts5": "messages_fts", "trigram": "messages_fts_trigram", "fts_cjk": "messages_fts_cjk"}[route]
        match = req.query if route == "fts5" else quote_for_substring_index(raw)
        sql_from = f"{table} JOIN messages AS m ON m.id = {table}.rowid"
        found = _count_where(conn, req, sql_from, f"{table} MATCH ?", [match], cap)
        terms = _distinct(gap_terms(req.query))
        if route == "fts5" and state.gap is not None and terms and found < cap:
            gap = "m.id > ? AND m.id <= ? AND " + _combine([_term_match_sql()] * len(terms), "AND")
            params = [*state.gap, *(like_pattern(term) for term in terms for _ in range(3))]
            found += _count_where(conn, req, like_from, gap, params, cap - found)
        return found
    if route == "like_scan":
        match, params, _ = _cjk_like_sql(raw)
        return _count_where(conn, req, like_from, match, params, cap)
    if route == "literal" and req.literal:
        # The search answered from word search's hits when any held the literal text (see _literal_among_words).
        found = _count_literal_among_words(conn, req, cap)
        if found:
            return found
        match, params, rows, _ = _literal_sql(req, _prefilter(req, state))
        return _count_where(conn, req, rows, match, params, cap)
    if route == "like_scan_fts_stale":
        groups = _stale_groups(req)
        return _count_where(conn, req, like_from, *_groups_sql(groups), cap) if groups else 0
    return 0


def _count_literal_among_words(conn: Any, req: _Search, cap: int) -> int:
    if not req.query:
        return 0
    match, params, rows, _ = _literal_sql(req, req.query)
    try:
        return _count_where(conn, req, rows, match, params, cap)
    except Exception as exc:
        if not _is_operational(exc) or is_fts_corruption_error(exc):
            raise
        return 0


@search_query
def count_search_rows(
    conn: Any,
    text: str,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
    roles: tuple[str, ...] | None,
    include_inactive: bool,
    cap: int,
    repairable: bool,
) -> int:
    """How many messages ``search_messages`` returns for these arguments over all its pages, up to ``cap``.

    The route is the one ``search_messages`` takes (asked for one hit); the
    count is that route's condition with the same filters, stopped at ``cap``.
    """
    req = _request(text, sources, excluded, roles, 1, 0, None, include_inactive, repairable, False, False)
    if req is None or cap <= 0:
        return 0
    with snapshot(conn):
        state = read_state(conn)
        route, hits = _route(conn, req, state)
        return _count_route(conn, req, state, route, cap) if hits else 0


@search_query
def search_messages_rows(
    conn: Any,
    text: str,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
    roles: tuple[str, ...] | None,
    limit: int,
    offset: int,
    sort: str | None,
    include_inactive: bool,
    with_context: bool,
    with_snippet: bool,
    repairable: bool,
    slow_ms: float,
) -> list[dict[str, Any]]:
    """Full-text search with the routing of spec §4; returns result dicts in canonical key order.

    Raises :class:`FtsRepairNeeded` (only when ``repairable``) when an index
    turned out to be corrupt.
    """
    started = time.perf_counter()
    req = _request(
        text, sources, excluded, roles, limit, offset, sort, include_inactive, repairable, with_snippet, with_context
    )
    if req is None:
        return []
    with snapshot(conn):
        state = read_state(conn)
        route, hits = _route(conn, req, state)
        windows: dict[int, list[dict[str, Any]]] = {}
        # Index routes bring most windows with their rows; the rest are looked up here.
        missing = [hit for hit in hits if "context" not in hit] if with_context else []
        if missing:
            try:
                windows = contexts(conn, missing)
            except DB_ERRORS as exc:  # the context is a courtesy; never fail the search for it
                log.debug("search context failed: %s", exc)
        for hit in hits:
            del hit["content"]
            if with_context and "context" not in hit:
                hit["context"] = windows.get(hit["id"], [])
    elapsed = (time.perf_counter() - started) * 1000.0
    if elapsed >= slow_ms:
        log.info("slow session search: path=%s elapsed=%.0fms rows=%d query=%r", route, elapsed, len(hits), text[:200])
    return hits


# ------------------------------------------------------------------- sessions


def _last_active_sql(alias: str) -> str:
    newest = f"(SELECT MAX(la.timestamp) FROM messages AS la WHERE la.session_id = {alias}.id)"
    beat = f"{alias}.last_activity_at"
    return f"COALESCE(MAX(COALESCE({beat}, {newest}), COALESCE({newest}, {beat})), {alias}.started_at)"


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@query
def search_sessions_rows(
    conn: Any, source: str | None, limit: int, offset: int, workspace_key: str | None
) -> list[dict[str, Any]]:
    """Every session (children and archived included), freshest first, with ``last_active``."""
    where, params = [], []
    if source:
        where.append("s.source = ?")
        params.append(source)
    if workspace_key:
        key = workspace_key.rstrip("/\\") or workspace_key
        escaped = _escape_like(key)
        where.append(
            "(s.git_repo_root IN (?, ?) OR (COALESCE(s.git_repo_root, '') = '' AND "
            "(s.cwd = ? OR s.cwd LIKE ? ESCAPE '\\' OR s.cwd LIKE ? ESCAPE '\\')))"
        )
        params.extend([workspace_key, key, key, f"{escaped}/%", f"{escaped}\\\\%"])
    sql = (
        "SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt, "
        f"{_last_active_sql('s')} AS last_active "
        "FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash "
        f"{'WHERE ' + ' AND '.join(where) if where else ''} "
        "ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT ? OFFSET ?"
    )
    return [resolve_prompt(row) for row in fetch_dicts(conn, sql, [*params, limit, offset])]


def _marker(alias: str, key: str) -> str:
    column = f"{alias}.model_config"
    return f"(CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{key}') END)"


@query
def session_ids_matching(
    conn: Any,
    needle: str,
    limit: int,
    include_archived: bool,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
) -> list[dict[str, Any]]:
    """Listable sessions whose id contains ``needle`` (case-insensitive), freshest first.

    The fallback of ``search_sessions_by_id`` for stores without
    ``list_sessions_rich``: roots and branch/reset children, no subagent
    runs. Row shape: ``get_session`` columns plus ``last_active``.
    """
    where = [
        "instr(lower(s.id), ?) > 0",
        (
            f"(s.parent_session_id IS NULL OR {_marker('s', '_branched_from')} IS NOT NULL "
            f"OR {_marker('s', '_reset_from')} IS NOT NULL)"
        ),
        f"{_marker('s', '_delegate_from')} IS NULL",
    ]
    params: list[Any] = [needle]
    if not include_archived:
        where.append("s.archived = 0")
    if sources is not None:
        where.append(f"s.source IN ({', '.join('?' * len(sources))})")
        params.extend(sources)
    if excluded:
        where.append(f"s.source NOT IN ({', '.join('?' * len(excluded))})")
        params.extend(excluded)
    sql = (
        "SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt, "
        f"{_last_active_sql('s')} AS last_active "
        "FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash "
        f"WHERE {' AND '.join(where)} ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT ?"
    )
    return [resolve_prompt(row) for row in fetch_dicts(conn, sql, [*params, limit])]


# ---------------------------------------------------------------- FTS status


@query
def fts_markers(conn: Any, prefix: str) -> tuple[str | None, str | None]:
    """(high water, progress) of the deferred rebuild with ``prefix`` (``fts_rebuild``/``fts_cjk_rebuild``)."""
    rows = dict(
        conn.execute(
            "SELECT key, value FROM state_meta WHERE key IN (?, ?)", (f"{prefix}_high_water", f"{prefix}_progress")
        ).fetchall()
    )
    return rows.get(f"{prefix}_high_water"), rows.get(f"{prefix}_progress")


@query
def fts_optimize_pending(conn: Any) -> bool:
    """True when a legacy layout, a pending backfill, a stale/pending CJK index (with the
    tokenizer loaded), demoted tables or an empty index over messages leave migration work."""
    with snapshot(conn):
        if fts_layout(conn) == "legacy" or get_meta(conn, "fts_rebuild_high_water") is not None:
            return True
        if cjk_tokenizer_loaded(conn) and (
            get_meta(conn, "fts_cjk_rebuild_high_water") is not None or get_meta(conn, "fts_cjk_stale") is not None
        ):
            return True
        return bool(trash_tables(conn)) or index_empty_with_messages(conn)


@query
def fts_layout_name(conn: Any) -> str:
    """``current``, ``legacy`` or ``none`` (no index), or ``unavailable`` when this SQLite lacks FTS5."""
    if conn.execute("SELECT 1 FROM pragma_module_list WHERE name = 'fts5'").fetchone() is None:
        return "unavailable"
    return fts_layout(conn)


@query
def fts_storage_unsettled(conn: Any) -> str | None:
    """Why the FTS storage cannot be declared current yet, or None when it can."""
    with snapshot(conn):
        if get_meta(conn, "fts_rebuild_high_water") is not None or index_empty_with_messages(conn):
            return "backfill_incomplete"
        if trash_tables(conn):
            return "teardown_incomplete"
        return None
