"""Search reads on PostgreSQL: ``search_messages_rows``, ``search_sessions_rows`` and the FTS status queries.

Word search runs on the GIN index over the stored ``tsvector`` column
(:data:`schema.SEARCH_COLUMN`), and ranking reads that stored vector. The
relevance order is ``ts_rank`` over windows of :data:`RANK_WINDOW` matches,
newest window first (see :func:`_ranked_statement`): a query matching
fewer rows than that is ranked as a whole, and a word in every other
message costs a bounded amount instead of ranking 100,000 rows for a page
of 20. The user's text goes through the same sanitizer as on SQLite and its FTS5
meaning (phrases, ``prefix*``, implicit AND, ``OR``, ``NOT``) is rebuilt as
a ``tsquery`` out of ``phraseto_tsquery``/``to_tsquery`` pieces, so
PostgreSQL's own parser tokenizes every term the way it tokenized the
document. Substring routes (CJK text, and a word query with no hit) use
``ILIKE``, which the ``pg_trgm`` GIN index of :mod:`..search_schema`
serves where the extension could be had (a sequential scan otherwise).

Snippets are built in Python for the returned page only, from at most the
first 64 KiB of each hit, with the bounded window of
``search_text.snippet``: a row with thousands of hits costs no more than
one with a few. The search deadline is the facade's: cancelling the
awaiting task makes asyncpg cancel the statement on the server, and the
pool rolls the connection back before reusing it.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, NamedTuple

from ...previews import context_text, structured_text
from ...search_text.sanitize import (
    OPERATORS,
    BooleanGroup,
    contains_cjk,
    count_cjk,
    like_pattern,
    searchable,
    plain_tokens,
    quote_for_substring_index,
    sanitize_fts5_query,
    trigram_eligible,
)
from ...search_text.snippet import bounded_snippet, literal_snippet, phrase_pattern
from ..content import from_columns
from ..schema import SEARCH_COLUMN
from ..search_schema import CJK_ROWS, TRIGRAM_DOCUMENT
from ..lineage_sql import last_active_sql
from .registry import query, query_begun_with
from .search_form import match_fraction, prefer_bitmap, term_stats

__all__ = [
    "CUSTOM_PLANS",
    "count_search_rows",
    "RANK_WINDOW",
    "fts_layout_name",
    "fts_markers",
    "fts_optimize_pending",
    "fts_storage_unsettled",
    "like_scan_statement",
    "search_messages_rows",
    "search_sessions_rows",
    "short_terms",
    "substring_search_statement",
    "tsquery_parts",
    "word_search_form",
    "word_search_statement",
]

log = logging.getLogger("hermes_state.search")

# Characters of a hit's content handed to Python (context and snippet need only the start).
_CLIP_CHARS = 65536
# Matches ranked together in relevance order: ranking reads every candidate's row, so this
# bounds the cost of a word that occurs in most messages (see _ranked_statement).
RANK_WINDOW = 500
# Rows at the newest (or oldest) end that a route ordered by time reads before searching
# every row (see _run_in_time_order): a substring in 2% of messages fills a page of 20 there,
# and a substring test of 1,000 rows costs a few milliseconds.
PROBE_ROWS = 1000
# Substring terms this short are the ones worth that probe (see short_terms).
SHORT_TERM = 5
# Page ends past this are "all rows" (LIMIT NULL): offset + limit could overflow BIGINT.
_ALL_ROWS = 2**62
# asyncpg reuses one prepared statement per SQL text, and after five runs the server may
# switch it to a generic plan, which cannot see how many rows a tsquery or an ILIKE pattern
# matches: "the" would then be ranked through a bitmap of every message instead of a
# backwards walk of the newest. SET LOCAL lasts until the reader's read transaction ends;
# the reader sends it with that transaction's BEGIN (query_begun_with).
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"
_ITEM = re.compile(r'"((?:[^"]|"")*)"(\*?)|(\S+)')


class _Item(NamedTuple):
    text: str
    prefix: bool


def _groups(match: str) -> list[tuple[list[_Item], list[_Item]]]:
    """A sanitized FTS5 query as OR-groups of (required items, excluded items).

    FTS5 binds ``NOT`` tighter than the implicit ``AND`` and ``AND`` tighter
    than ``OR``, so the query is a disjunction of conjunctions.
    """
    groups: list[tuple[list[_Item], list[_Item]]] = []
    positive: list[_Item] = []
    negative: list[_Item] = []
    negate = False
    for found in _ITEM.finditer(match):
        quoted, star, bare = found.groups()
        if bare is not None and bare.upper() in OPERATORS | {"NEAR"}:
            word = bare.upper()
            if word == "OR":
                groups.append((positive, negative))
                positive, negative, negate = [], [], False
            elif word == "NOT":
                negate = True
            continue
        if quoted is not None:
            item = _Item(quoted.replace('""', '"'), bool(star))
        else:
            item = _Item(bare.rstrip("*").replace("*", " "), bare.endswith("*"))
        if item.text.strip():
            (negative if negate else positive).append(item)
        negate = False
    groups.append((positive, negative))
    return [g for g in groups if g[0]]


def _prefix_literal(text: str) -> str:
    # A tsquery quoted string: '' and \\ escaped; ':*' makes every lexeme of it a prefix.
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "':*"


def tsquery_parts(match: str, first: int = 1) -> tuple[str | None, list[str]]:
    """SQL for the ``tsquery`` meaning ``match`` (a sanitized FTS5 query), with its parameters.

    Placeholders start at ``$first``. None when nothing searchable is left.
    """
    params: list[str] = []

    def piece(item: _Item) -> str:
        if item.prefix:
            params.append(_prefix_literal(item.text))
            return f"to_tsquery('simple', ${first + len(params) - 1})"
        params.append(item.text)
        return f"phraseto_tsquery('simple', ${first + len(params) - 1})"

    ors = []
    for positive, negative in _groups(match):
        ands = [piece(i) for i in positive] + [f"(!! {piece(i)})" for i in negative]
        ors.append("(" + " && ".join(ands) + ")")
    if not ors:
        return None, []
    return " || ".join(ors), params


class _Search(NamedTuple):
    query: str  # sanitized
    sources: tuple[str, ...] | None
    excluded: tuple[str, ...] | None
    roles: tuple[str, ...] | None
    limit: int
    offset: int
    sort: str | None
    include_inactive: bool
    with_snippet: bool
    with_context: bool = False
    # The user's text as literal substring groups, when word search cannot find it as typed.
    literal: tuple[BooleanGroup, ...] | None = None

    @property
    def wants_tool_rows(self) -> bool:
        return self.roles is not None and "tool" in self.roles

    def filters(self, params: list[Any]) -> list[str]:
        """WHERE clauses on ``m`` and ``s``; their values are appended to ``params``."""
        where: list[str] = []
        if not self.include_inactive:
            where.append("(m.active = 1 OR m.compacted = 1)")
        if self.sources is not None:
            params.append(list(self.sources))
            where.append(f"s.source = ANY(${len(params)}::text[])")
        if self.excluded:
            params.append(list(self.excluded))
            where.append(f"NOT (s.source = ANY(${len(params)}::text[]))")
        if self.roles:
            params.append(list(self.roles))
            where.append(f"m.role = ANY(${len(params)}::text[])")
        return where


_HIT_COLUMNS = (
    "m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, s.started_at AS session_started, "
    f"m.content_kind, CASE WHEN m.content_kind = 0 THEN left(m.content, {_CLIP_CHARS}) ELSE m.content END AS content, "
    f"m.content_bytes, left(m.tool_calls, {_CLIP_CHARS}) AS tool_calls"
)


def _content(record: Any) -> Any:
    return from_columns(record["content_kind"], record["content"], record["content_bytes"])


def _plain(value: Any) -> str:
    """The text SQLite's index holds for a stored value (structured content in its encoded form)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def _hit(record: Any, pattern: re.Pattern[str] | None, substring: bool, context: bool = False) -> dict[str, Any]:
    """A result dict (``content`` decoded, removed later); ``context``: the record holds :data:`_CONTEXT_COLUMNS`."""
    content = _content(record)
    snippet = None
    if pattern is not None:
        texts = [_plain(content), record["tool_name"] or "", record["tool_calls"] or ""]
        snippet = next((s for s in (bounded_snippet(t, pattern, substring) for t in texts) if s is not None), None)
    hit = {
        "id": record["id"],
        "session_id": record["session_id"],
        "role": record["role"],
        "snippet": snippet,
        "timestamp": record["timestamp"],
        "tool_name": record["tool_name"],
        "source": record["source"],
        "model": record["model"],
        "session_started": record["session_started"],
        "content": content,
    }
    if context:
        hit["context"] = _window(record, hit)
    return hit


def _time_order(req: _Search, rank: str) -> str:
    """``sort="newest"``/``"oldest"`` of the word route: time first, relevance among equal times."""
    direction = "ASC" if req.sort == "oldest" else "DESC"
    return f"m.timestamp {direction}, {rank} DESC, m.id {direction}"


def _statement(
    req: _Search, match_sql: str, params: list[Any], order: str, probe: str | None = None, among: str = "true"
) -> tuple[str, list[Any]]:
    """The page of hits of ``match_sql`` in ``order``; ``probe`` ("DESC"/"ASC"): only among the
    PROBE_ROWS rows at that end of (timestamp, id) order of the rows where ``among`` holds
    (a condition every hit meets). In (timestamp, id) order with ``req.with_context``, each row
    also holds :data:`_CONTEXT_COLUMNS`, read for the page's rows only."""
    where = [match_sql, *req.filters(params)]
    params.extend([req.limit, req.offset])
    rows = "messages" if probe is None else (
        f'(SELECT * FROM messages WHERE {among} ORDER BY "timestamp" {probe}, id {probe} LIMIT {PROBE_ROWS})'
    )
    sql = (
        f"SELECT {_HIT_COLUMNS} FROM {rows} AS m JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE {' AND '.join(where)} ORDER BY {order} "
        f"LIMIT ${len(params) - 1} OFFSET ${len(params)}"
    )
    direction = _TIME_ORDERS.get(order)
    if req.with_context and direction is not None:
        sql = (
            f"SELECT h.*, {_CONTEXT_COLUMNS} FROM ({sql}) AS h {_context_joins('h.session_id', 'h.timestamp', 'h.id')} "
            f"ORDER BY h.timestamp {direction}, h.id {direction}"
        )
    return sql, params


# The orders of routes that read hits in (timestamp, id) order, and their direction.
_TIME_ORDERS = {f"m.timestamp {d}, m.id {d}": d for d in ("ASC", "DESC")}


Match = tuple[str, list[Any]]  # (SQL condition, its parameters)


async def _run_in_time_order(
    conn: Any, req: _Search, probe: Match, full: Match, direction: str, among: str = "true"
) -> list[Any]:
    """The page of hits ordered by (timestamp, id) ``direction``; ``probe`` and ``full`` are one
    condition, written for a scan of a few rows and for the index.

    The newest (or oldest) PROBE_ROWS rows are tried first: they are a prefix of
    that order, so when they hold the whole page it is the page, found without
    the index search that would fetch and sort every match of a frequent
    substring. Otherwise the statement runs over every row.
    """
    order = f"m.timestamp {direction}, m.id {direction}"
    rows = await _fetch_planned(conn, _statement(req, probe[0], list(probe[1]), order, direction, among))
    if len(rows) == req.limit:
        return rows
    return await _fetch_planned(conn, _statement(req, full[0], list(full[1]), order))


async def _fetch_planned(conn: Any, statement: tuple[str, list[Any]]) -> list[Any]:
    """Rows of ``statement`` (planned for its parameters: see :data:`CUSTOM_PLANS`)."""
    return await conn.fetch(statement[0], *statement[1])


def _ranked_statement(req: _Search, tsq: str, params: list[Any], bitmap: bool = False) -> tuple[str, list[Any]]:
    """Relevance order: ``ts_rank`` DESC (then id) within windows of RANK_WINDOW matches, newest window first.

    Window k holds the matches ranked k*W+1 .. (k+1)*W by id descending (commit
    order, newest first), so every match has one place in one total order and
    paging with any offset reaches each exactly once. Only the windows the page
    overlaps are read: for a common word the newest matches come off the primary
    key backwards (the planner's choice when most rows match) and a rare word's
    matches come from the GIN bitmap, so neither ranks more than a window or two.
    A query with at most RANK_WINDOW matches is ranked as a whole, as before.

    ``bitmap``: order the matches by ``id + 0``, which no index provides, so
    that they are read from the GIN bitmap and sorted, never by the backward
    walk (see :mod:`.search_form`); the candidates are the same. With
    ``req.with_context`` each row also holds :data:`_CONTEXT_COLUMNS`.
    """
    where = [f"m.{SEARCH_COLUMN} @@ ({tsq})", *req.filters(params)]
    # The session row is needed only to filter by source.
    join = "JOIN sessions AS s ON s.id = m.session_id " if req.sources is not None or req.excluded else ""
    first = (req.offset // RANK_WINDOW) * RANK_WINDOW
    end = req.offset + req.limit
    span = None if end > _ALL_ROWS else -(-end // RANK_WINDOW) * RANK_WINDOW - first
    params.extend([span, first, RANK_WINDOW, req.limit, req.offset - first])
    n = len(params)
    order = "m.id + 0" if bitmap else "m.id"
    # The context windows of the page's rows come in the same statement (one round trip fewer).
    columns, joins = _HIT_COLUMNS, ""
    if req.with_context:
        columns += f", {_CONTEXT_COLUMNS}"
        joins = _context_joins("m.session_id", "m.timestamp", "m.id") + " "
    # The page is cut before its rows are read: only LIMIT rows are joined for their columns.
    sql = (
        f"WITH candidate AS (SELECT m.id, m.{SEARCH_COLUMN} AS doc FROM messages AS m {join}"
        f"WHERE {' AND '.join(where)} ORDER BY {order} DESC LIMIT ${n - 4} OFFSET ${n - 3}), "
        f"ranked AS (SELECT id, (row_number() OVER (ORDER BY id DESC) - 1) / ${n - 2} AS win, "
        f"ts_rank(doc, ({tsq})) AS rank FROM candidate), "
        f"page AS (SELECT id, win, rank FROM ranked ORDER BY win, rank DESC, id LIMIT ${n - 1} OFFSET ${n}) "
        f"SELECT {columns} FROM page AS r JOIN messages AS m ON m.id = r.id "
        f"JOIN sessions AS s ON s.id = m.session_id {joins}ORDER BY r.win, r.rank DESC, r.id"
    )
    return sql, params


def _word_statement(req: _Search, bitmap: bool = False) -> tuple[str, list[Any]] | None:
    tsq, params = tsquery_parts(req.query)
    if tsq is None:
        return None
    if req.sort not in ("newest", "oldest"):
        return _ranked_statement(req, tsq, list(params), bitmap)
    rank = f"ts_rank(m.{SEARCH_COLUMN}, ({tsq}))"
    return _statement(req, f"m.{SEARCH_COLUMN} @@ ({tsq})", list(params), _time_order(req, rank))


def word_search_statement(
    text: str, limit: int = 20, offset: int = 0, sort: str | None = None, bitmap: bool = False, context: bool = False
) -> tuple[str, list[Any]] | None:
    """The statement (and parameters) ``search_messages(text, limit=, offset=, sort=)`` runs on the word index.

    ``bitmap``: the form :func:`word_search_form` chose; ``context``: with the
    context windows, as for ``search_messages`` without ``fields``. For
    ``EXPLAIN`` and the benchmark's bare statement; None when nothing
    searchable is left.
    """
    req = _Search(sanitize_fts5_query(text), None, None, None, limit, offset, sort, False, False, context)
    return _word_statement(req, bitmap)


async def _bitmap_form(conn: Any, req: _Search) -> bool:
    """True when the relevance statement of ``req`` should read every match (see :mod:`.search_form`).

    Only for the default filter (a filter on role or source is not in the
    estimate) and without prefixes (the backward walk tests a prefix for about
    what the bitmap costs per match: measured, the planner's choice was as good).
    """
    if req.sources is not None or req.excluded or req.roles is not None or req.sort in ("newest", "oldest"):
        return False
    parsed = _groups(req.query)
    if not parsed or any(i.prefix for p, n in parsed for i in [*p, *n]):
        return False
    stats = await term_stats(conn)
    if stats is None:
        return False
    needed = -(-(req.offset + req.limit) // RANK_WINDOW) * RANK_WINDOW
    groups = [([i.text for i in p], [i.text for i in n]) for p, n in parsed]
    return prefer_bitmap(stats, match_fraction(stats, groups), needed)


async def word_search_form(conn: Any, text: str, limit: int = 20, offset: int = 0) -> bool:
    """The ``bitmap`` argument of :func:`word_search_statement` that ``search_messages`` would use (the benchmark's)."""
    return await _bitmap_form(conn, _Search(sanitize_fts5_query(text), None, None, None, limit, offset, None, False, False))


async def _word_hits(conn: Any, req: _Search) -> list[dict[str, Any]]:
    statement = _word_statement(req, await _bitmap_form(conn, req))
    if statement is None:
        return []
    rows = await _fetch_planned(conn, statement)
    pattern = phrase_pattern(req.query, False) if req.with_snippet else None
    context = req.with_context and req.sort not in ("newest", "oldest")  # the relevance statement's
    return [_hit(r, pattern, False, context) for r in rows]


def _ilike(params: list[Any], term: str) -> str:
    params.append(like_pattern(term))
    n = len(params)
    return (
        f"(m.content ILIKE ${n} ESCAPE '\\' OR m.tool_name ILIKE ${n} ESCAPE '\\' "
        f"OR m.tool_calls ILIKE ${n} ESCAPE '\\')"
    )


def _like_snippet(content: Any, term: str) -> str | None:
    # The same window as SQLite's LIKE route: 120 characters from 40 before the first hit.
    if content is None:
        return None
    text = _plain(content)
    at = text.find(term) if term else -1
    start = max(0, at - 40) if at >= 0 else 0
    return text[start : start + 120]


def _like_tokens(raw: str) -> list[str]:
    return list(dict.fromkeys(plain_tokens(raw) or [raw]))


def _cjk_like_match(raw: str) -> tuple[Match, str]:
    """((condition, parameters), the rows every hit is among) of the CJK LIKE route: any token occurs
    literally (tool rows included).

    When every token holds CJK, so does every matching row: the condition then
    names :data:`CJK_ROWS` (and the hits are among them), which lets the
    partial CJK index serve it.
    """
    params: list[Any] = []
    tokens = _like_tokens(raw)
    match = "(" + " OR ".join(_ilike(params, t) for t in tokens) + ")"
    if all(contains_cjk(t) for t in tokens):
        return (f"{CJK_ROWS} AND {match}", params), CJK_ROWS
    return (match, params), "true"


def like_scan_statement(text: str, limit: int = 20, probe: bool = False, context: bool = False) -> tuple[str, list[Any]]:
    """The statement of the CJK LIKE route for ``text`` (``probe``: its first try, over the newest rows;
    ``context``: with the context windows).

    For ``EXPLAIN`` and the benchmark's bare statements.
    """
    sanitized = sanitize_fts5_query(text)
    req = _Search(sanitized, None, None, None, limit, 0, None, False, False, context)
    (match, params), among = _cjk_like_match(sanitized.strip('"').strip())
    return _statement(req, match, params, "m.timestamp DESC, m.id DESC", "DESC" if probe else None, among)


async def _cjk_like(conn: Any, req: _Search, raw: str) -> list[dict[str, Any]]:
    """CJK text too short for the substring index: any token occurs literally, newest first."""
    tokens = _like_tokens(raw)
    match, among = _cjk_like_match(raw)
    rows = await _run_in_time_order(conn, req, match, match, "DESC", among)
    hits = [_hit(r, None, True, req.with_context) for r in rows]
    if req.with_snippet:
        for hit in hits:
            hit["snippet"] = _like_snippet(hit["content"], tokens[0])
    return hits


def _substring_term(params: list[Any], term: str, indexed: bool) -> str:
    """True when ``term`` occurs in content, tool_name or tool_calls (never NULL, so NOT works).

    ``indexed``: written on the trigram index's expression, for a search of every
    row; otherwise column by column, which costs less per row read (no joined copy).
    """
    if not indexed or "\n" in term:
        # (A term holding a newline could span two columns in the joined text.)
        return f"coalesce({_ilike(params, term)}, false)"
    # The trigram index's expression (unqualified: only messages has these columns); the
    # columns are joined by a newline, which this term cannot span.
    params.append(like_pattern(term))
    return f"({TRIGRAM_DOCUMENT} ILIKE ${len(params)} ESCAPE '\\')"


def _substring_statement(req: _Search, raw: str, indexed: bool = True) -> Match | None:
    """(condition, parameters) of SQLite's trigram route as ``ILIKE``: each term a literal substring
    (AND/OR/NOT kept), tool rows left out.

    ``m.role <> 'tool'`` is also the trigram index's predicate, so the planner may use it.
    """
    params: list[Any] = []
    ors = []
    for positive, negative in _groups(quote_for_substring_index(raw)):
        ands = [_substring_term(params, i.text, indexed) for i in positive]
        ands += [f"NOT {_substring_term(params, i.text, indexed)}" for i in negative]
        ors.append("(" + " AND ".join(ands) + ")")
    if not ors:
        return None
    return f"m.role <> 'tool' AND ({' OR '.join(ors)})", params


def _direction(req: _Search) -> str:
    return "ASC" if req.sort == "oldest" else "DESC"


def substring_search_statement(
    text: str, limit: int = 20, probe: bool = False, context: bool = False
) -> tuple[str, list[Any]] | None:
    """The statement (and parameters) of the substring route for ``text`` (CJK, or a word query with no hit).

    ``probe``: the first statement the route tries, over the newest PROBE_ROWS
    rows only; ``context``: with the context windows. For ``EXPLAIN`` and the
    benchmark's bare statements; None when nothing searchable is left.
    """
    sanitized = sanitize_fts5_query(text)
    req = _Search(sanitized, None, None, None, limit, 0, None, False, False, context)
    match = _substring_statement(req, sanitized.strip('"').strip(), indexed=not probe)
    if match is None:
        return None
    direction = _direction(req)
    order = f"m.timestamp {direction}, m.id {direction}"
    return _statement(req, match[0], match[1], order, direction if probe else None)


def short_terms(raw: str) -> bool:
    """True when some OR-group's positive terms are all SHORT_TERM characters or fewer.

    Only such a query is likely to match so many rows that reading the newest
    ones first pays: a longer term, or two terms together, match few rows, which
    the trigram index finds faster than a substring test of PROBE_ROWS rows.
    """
    return any(all(len(i.text) <= SHORT_TERM for i in positive) for positive, _ in _groups(quote_for_substring_index(raw)))


async def _substring_hits(conn: Any, req: _Search, raw: str) -> list[dict[str, Any]]:
    full = _substring_statement(req, raw)
    probe = _substring_statement(req, raw, indexed=False)
    if full is None or probe is None:
        return []
    if short_terms(raw):
        rows = await _run_in_time_order(conn, req, probe, full, _direction(req))
    else:
        order = f"m.timestamp {_direction(req)}, m.id {_direction(req)}"
        rows = await _fetch_planned(conn, _statement(req, full[0], full[1], order))
    pattern = phrase_pattern(quote_for_substring_index(raw), True) if req.with_snippet else None
    return [_hit(r, pattern, True, req.with_context) for r in rows]


def _literal_match(groups: tuple[BooleanGroup, ...], first: int = 0) -> Match:
    """(condition, parameters): some group has all its positive terms and none of its negative
    ones as substrings of content, tool_name or tool_calls (tool rows included).

    Placeholders start after ``first`` (parameters bound before these)."""
    params: list[Any] = [None] * first
    ors = []
    for group in groups:
        ands = [_substring_term(params, t, False) for t in dict.fromkeys(group.positive)]
        ands += [f"NOT {_substring_term(params, t, False)}" for t in dict.fromkeys(group.negative)]
        ors.append("(" + " AND ".join(ands) + ")")
    return "(" + " OR ".join(ors) + ")", params[first:]


def _literal_among_words(req: _Search) -> Match | None:
    """The literal match over word search's hits only (None when word search cannot run the query).

    Text that holds a literal term also holds the words the sanitizer made of it, so a query
    word search answers loosely (``c++`` as ``c``, ``TODO: fix``) needs no scan of every row.
    """
    if not req.literal or not req.query or _fts5_rejects(req.query):
        return None
    tsq, params = tsquery_parts(req.query)
    if tsq is None:
        return None
    match, literal_params = _literal_match(req.literal, len(params))
    return f"m.{SEARCH_COLUMN} @@ ({tsq}) AND {match}", [*params, *literal_params]


async def _precise_hits(conn: Any, req: _Search) -> list[dict[str, Any]] | None:
    """The literal hits of a query word search answers loosely, or None when there are none."""
    among = _literal_among_words(req)
    if among is None:
        return None
    if req.offset:  # whether this route answers must not depend on the page asked for
        probe = req._replace(limit=1, offset=0)
        if not await _fetch_planned(conn, _statement(probe, among[0], list(among[1]), _literal_order(req))):
            return None
    hits = await _literal_hits(conn, req, among)
    return None if not hits and not req.offset else hits


def _literal_order(req: _Search) -> str:
    """Without a ``sort``, the most recently stored rows first (the primary key's order, read
    backwards until the page is full); else the time order asked for."""
    if req.sort in ("newest", "oldest"):
        return f"m.timestamp {_direction(req)}, m.id {_direction(req)}"
    return "m.id DESC"


async def _literal_hits(conn: Any, req: _Search, among: Match | None = None) -> list[dict[str, Any]]:
    """What word search cannot find as typed (``C#``, ``status=502``, a URL): every term a literal
    substring (OR/NOT kept), tool rows included, most recently stored first (or in the time
    order ``sort`` asks for). ``among``: only among word search's hits. Hits are marked in the snippet.
    """
    if not req.literal:
        return []
    match = among if among is not None else _literal_match(req.literal)
    if among is None and req.sort in ("newest", "oldest"):
        rows = await _run_in_time_order(conn, req, match, match, _direction(req))
    else:
        rows = await _fetch_planned(conn, _statement(req, match[0], list(match[1]), _literal_order(req)))
    # Statements in (timestamp, id) order bring the context windows; the caller looks up the others.
    with_windows = req.with_context and _literal_order(req) in _TIME_ORDERS
    hits = [_hit(r, None, True, with_windows) for r in rows]
    if req.with_snippet:
        terms = [term for group in req.literal for term in group.positive]
        for hit, record in zip(hits, rows):
            content = _plain(hit["content"])
            texts = [structured_text(content) or "", content, record["tool_name"] or "", record["tool_calls"] or ""]
            hit["snippet"] = literal_snippet(texts, terms)
    return hits


def _fts5_rejects(match: str) -> bool:
    """True where FTS5 raises a syntax error: an unquoted term with a character no bareword may hold.

    SQLite then answers ``[]`` without any fallback; so does this backend.
    """
    for found in _ITEM.finditer(match):
        bare = found.group(3)
        if bare is None or bare.upper() in OPERATORS | {"NEAR"}:
            continue
        if any(not (ch.isalnum() or ch in "_\x1a*" or ord(ch) > 127) for ch in bare):
            return True
    return False


async def _route(conn: Any, req: _Search) -> tuple[str, list[dict[str, Any]]]:
    raw = req.query.strip('"').strip()
    if not req.query:  # nothing left for word search (":)", "()"): only the literal match can answer
        return "literal", await _literal_hits(conn, req)
    if contains_cjk(req.query):
        cjk_tokens = [tok for tok in plain_tokens(raw) if contains_cjk(tok)]
        if count_cjk(raw) >= 3 and all(count_cjk(tok) >= 3 for tok in cjk_tokens) and not req.wants_tool_rows:
            return "trigram", await _substring_hits(conn, req, raw)
        return "like_scan", await _cjk_like(conn, req, raw)
    precise = await _precise_hits(conn, req)
    if precise is not None:
        return "literal", precise
    hits = [] if _fts5_rejects(req.query) else await _word_hits(conn, req)
    route = "fts5"
    if not hits and not req.wants_tool_rows and trigram_eligible(req.query) and not _fts5_rejects(req.query):
        # A substring finds what word tokenization cannot ("cker" in "docker").
        hits, route = await _substring_hits(conn, req, raw), "trigram"
    if not hits and req.literal:  # typed as stored ("C#", "status=502"), it is found literally
        hits = await _literal_hits(conn, req)
        route = "literal" if hits else route
    return route, hits


# The message before and after a hit in its session (any active state), as columns of the hit's row.
_CONTEXT_COLUMNS = (
    f"b.role AS b_role, b.content_kind AS b_kind, left(b.content, {_CLIP_CHARS}) AS b_text, b.content_bytes AS b_raw, "
    f"a.role AS a_role, a.content_kind AS a_kind, left(a.content, {_CLIP_CHARS}) AS a_text, a.content_bytes AS a_raw"
)


def _context_joins(sid: str, ts: str, hit_id: str) -> str:
    """The lateral joins :data:`_CONTEXT_COLUMNS` reads, for the hit whose columns these expressions name."""
    near = "SELECT x.role, x.content_kind, x.content, x.content_bytes FROM messages AS x WHERE x.session_id = {sid} "
    return (
        f"LEFT JOIN LATERAL ({near.format(sid=sid)}AND (x.timestamp, x.id) < ({ts}, {hit_id}) "
        "ORDER BY x.timestamp DESC, x.id DESC LIMIT 1) AS b ON true "
        f"LEFT JOIN LATERAL ({near.format(sid=sid)}AND (x.timestamp, x.id) > ({ts}, {hit_id}) "
        "ORDER BY x.timestamp ASC, x.id ASC LIMIT 1) AS a ON true"
    )


_CONTEXT_SQL = (
    f"SELECT hit.id, {_CONTEXT_COLUMNS} "
    "FROM unnest($1::bigint[], $2::text[], $3::double precision[]) AS hit(id, sid, ts) "
    + _context_joins("hit.sid", "hit.ts", "hit.id")
)


def _window(record: Any, hit: dict[str, Any]) -> list[dict[str, Any]]:
    """The context of ``hit`` from a record holding :data:`_CONTEXT_COLUMNS` (None: no such record)."""

    def near(side: str) -> list[dict[str, Any]]:
        if record is None or record[f"{side}_role"] is None:
            return []
        content = from_columns(record[f"{side}_kind"], record[f"{side}_text"], record[f"{side}_raw"])
        return [{"role": record[f"{side}_role"], "content": context_text(content)}]

    return [*near("b"), {"role": hit["role"], "content": context_text(hit["content"])}, *near("a")]


async def _contexts(conn: Any, hits: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """For each hit id: the message before it, the hit, the message after (any active state)."""
    rows = await conn.fetch(
        _CONTEXT_SQL, [h["id"] for h in hits], [h["session_id"] for h in hits], [h["timestamp"] for h in hits]
    )
    by_id = {r["id"]: r for r in rows}
    return {hit["id"]: _window(by_id.get(hit["id"]), hit) for hit in hits}


def _request(
    text: str,
    sources: tuple[str, ...] | None,
    excluded: tuple[str, ...] | None,
    roles: tuple[str, ...] | None,
    limit: int,
    offset: int,
    sort: str | None,
    include_inactive: bool,
    with_snippet: bool,
    with_context: bool,
) -> _Search | None:
    """The request for ``text``, or None when it can find nothing (blank text, ``limit`` 0, no source)."""
    planned = searchable(text, limit, sources)
    if planned is None:
        return None
    sanitized, literal = planned
    return _Search(
        sanitized, sources, excluded, roles, limit, offset, sort, include_inactive, with_snippet, with_context, literal
    )


def _route_match(req: _Search, route: str) -> Match | None:
    """(condition, parameters) on ``m`` that ``route`` matches for ``req`` (None: nothing)."""
    raw = req.query.strip('"').strip()
    if route == "fts5":
        tsq, params = tsquery_parts(req.query)
        return None if tsq is None else (f"m.{SEARCH_COLUMN} @@ ({tsq})", params)
    if route == "trigram":
        return _substring_statement(req, raw)
    if route == "like_scan":
        return _cjk_like_match(raw)[0]
    if route == "literal" and req.literal:
        return _literal_match(req.literal)
    return None


@query_begun_with(CUSTOM_PLANS)
async def count_search_rows(
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
    req = _request(text, sources, excluded, roles, 1, 0, None, include_inactive, False, False)
    if req is None or cap <= 0:
        return 0
    route, hits = await _route(conn, req)
    if not hits:
        return 0
    if route == "literal":
        # The search answered from word search's hits when any held the literal text (see _precise_hits).
        among = _literal_among_words(req)
        found = await _count_matching(conn, req, among, cap) if among is not None else 0
        if found:
            return found
    return await _count_matching(conn, req, _route_match(req, route), cap)


async def _count_matching(conn: Any, req: _Search, match: Match | None, cap: int) -> int:
    if match is None:
        return 0
    params = list(match[1])
    where = [match[0], *req.filters(params)]
    params.append(cap)
    sql = (
        "SELECT count(*) FROM (SELECT 1 FROM messages AS m JOIN sessions AS s ON s.id = m.session_id "
        f"WHERE {' AND '.join(where)} LIMIT ${len(params)}) AS c"
    )
    return int(await conn.fetchval(sql, *params))


@query_begun_with(CUSTOM_PLANS)
async def search_messages_rows(
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
    """Full-text search; returns result dicts in canonical key order (the SQLite query's shape).

    ``repairable`` is accepted for parity: a GIN index cannot be corrupt in the FTS5 sense.
    """
    started = time.perf_counter()
    req = _request(text, sources, excluded, roles, limit, offset, sort, include_inactive, with_snippet, with_context)
    if req is None:
        return []
    route, hits = await _route(conn, req)
    # The relevance statement brings the context windows with the hits; other routes ask for them.
    pending = [hit for hit in hits if "context" not in hit] if with_context else []
    windows = await _contexts(conn, pending) if pending else {}
    for hit in hits:
        del hit["content"]
        if with_context and hit["id"] in windows:
            hit["context"] = windows[hit["id"]]
    elapsed = (time.perf_counter() - started) * 1000.0
    if elapsed >= slow_ms:
        log.info("slow session search: path=%s elapsed=%.0fms rows=%d query=%r", route, elapsed, len(hits), text[:200])
    return hits


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@query
async def search_sessions_rows(
    conn: Any, source: str | None, limit: int, offset: int, workspace_key: str | None
) -> list[dict[str, Any]]:
    """Every session (children and archived included), freshest first, with ``last_active``."""
    where: list[str] = []
    params: list[Any] = []
    if source:
        params.append(source)
        where.append(f"s.source = ${len(params)}")
    if workspace_key:
        key = workspace_key.rstrip("/\\") or workspace_key
        escaped = _escape_like(key)
        params.extend([workspace_key, key, f"{escaped}/%", f"{escaped}\\\\%"])
        n = len(params)
        where.append(
            f"(s.git_repo_root IN (${n - 3}, ${n - 2}) OR (COALESCE(s.git_repo_root, '') = '' AND "
            f"(s.cwd = ${n - 2} OR s.cwd LIKE ${n - 1} ESCAPE '\\' OR s.cwd LIKE ${n} ESCAPE '\\')))"
        )
    params.extend([limit, offset])
    sql = (
        "SELECT s.*, COALESCE(p.prompt, s.system_prompt) AS _resolved_prompt, "
        f"{last_active_sql('s')} AS last_active "
        "FROM sessions AS s LEFT JOIN system_prompts AS p ON p.hash = s.system_prompt_hash "
        f"{'WHERE ' + ' AND '.join(where) if where else ''} "
        f"ORDER BY last_active DESC, s.started_at DESC, s.id DESC LIMIT ${len(params) - 1} OFFSET ${len(params)}"
    )
    rows = []
    for record in await conn.fetch(sql, *params):
        row = dict(record)
        row["system_prompt"] = row.pop("_resolved_prompt")
        rows.append(row)
    return rows


# FTS5 upkeep has no PostgreSQL counterpart: the GIN index is maintained by
# PostgreSQL itself on every write, so there is never a backfill, a legacy
# layout or a teardown pending.


@query
async def fts_markers(conn: Any, prefix: str) -> tuple[str | None, str | None]:
    """(high water, progress) of a deferred rebuild: always (None, None) (the index is never deferred)."""
    return None, None


@query
async def fts_optimize_pending(conn: Any) -> bool:
    """False: PostgreSQL keeps the search index current with every write."""
    return False


@query
async def fts_layout_name(conn: Any) -> str:
    """``current`` (the GIN index is part of the schema)."""
    return "current"


@query
async def fts_storage_unsettled(conn: Any) -> str | None:
    """None: there is no backfill or teardown to wait for."""
    return None
