"""Which form the relevance statement takes: the planner's cost model corrected with ``pg_stats``.

The relevance statement needs the newest N matches of a word query (N: the
rank windows the page overlaps). PostgreSQL finds them in one of two ways:
walking the primary key backwards, testing every row, which reads about N/s
rows for a query matching a share s of the messages; or reading all s * rows
matches from the GIN bitmap and sorting them. The planner chooses by its
cost model, which on a cached table prices the bitmap's scattered heap
visits at four times what they cost: a word in 2-3% of the messages (2,000-
3,000 of 100,000) is then walked backwards through about 20,000 rows, twice
what the bitmap costs. :func:`prefer_bitmap` makes that choice from the
same estimate of s the planner uses, with the per-row costs measured here
(:data:`BITMAP_ROW_COST`), and the statement then orders by ``id + 0``,
which no index provides, so the bitmap form is the one planned.

The estimate is the column's element statistics (``most_common_elems`` of
the stored ``tsvector``, which ``ANALYZE`` and autovacuum keep), read once
per connection every :data:`STATS_TTL` seconds and combined the way the
planner's ``tsmatchsel`` combines them. Without statistics (a table never
analyzed) the planner chooses alone, as before. Either form returns the same
rows.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..schema import SEARCH_COLUMN

__all__ = ["BITMAP_ROW_COST", "STATS_TTL", "TermStats", "match_fraction", "prefer_bitmap", "term_stats"]

# Seconds a connection keeps the statistics it read (ANALYZE changes them rarely).
STATS_TTL = 300.0
# Cost of a match read through the bitmap (scattered heap visit, sort) over the cost of a
# row tested in the backward walk, measured on the Zipf corpus of bench/search.py: 2-3 us
# against 0.45 us.
BITMAP_ROW_COST = 6.0
# The planner's selectivity of a lexeme it has no statistics for (ts_selfuncs.c).
_DEFAULT_FRACTION = 0.005
_WORD = re.compile(r"\w+")

_STATS_SQL = f"""
SELECT s.most_common_elems::text::text[] AS elems, s.most_common_elem_freqs AS freqs,
       (SELECT c.reltuples FROM pg_class AS c WHERE c.oid = 'messages'::regclass) AS rows
FROM pg_stats AS s
WHERE s.schemaname = current_schema() AND s.tablename = 'messages' AND s.attname = '{SEARCH_COLUMN}'
"""


class TermStats(NamedTuple):
    """Share of messages holding each common lexeme, the least such share, and the table's row estimate."""

    freqs: dict[str, float]
    min_freq: float
    rows: float


_cache: weakref.WeakKeyDictionary[Any, tuple[float, TermStats | None]] = weakref.WeakKeyDictionary()


async def term_stats(conn: Any) -> TermStats | None:
    """The element statistics of the search column (cached per connection); None when there are none."""
    now = time.monotonic()
    cached = _cache.get(conn)
    if cached is not None and now - cached[0] < STATS_TTL:
        return cached[1]
    row = await conn.fetchrow(_STATS_SQL)
    stats = None
    if row is not None and row["elems"] and row["freqs"] and row["rows"] and row["rows"] > 0:
        elems, freqs = row["elems"], row["freqs"]
        # most_common_elem_freqs: one per element, then the least and greatest of them and the null share.
        stats = TermStats(dict(zip(elems, freqs)), float(freqs[len(elems)]), float(row["rows"]))
    _cache[conn] = (now, stats)
    return stats


def _share(stats: TermStats, text: str) -> float:
    """Estimated share of messages holding every word of ``text`` (a term or a phrase)."""
    unknown = min(_DEFAULT_FRACTION, stats.min_freq / 2)
    share = 1.0
    for word in _WORD.findall(text.lower()):
        share *= stats.freqs.get(word, unknown)
    return share


def match_fraction(stats: TermStats, groups: Sequence[tuple[Sequence[str], Sequence[str]]]) -> float:
    """Estimated share of messages matching OR-groups of (required, excluded) terms, terms independent."""
    none = 1.0
    for positive, negative in groups:
        group = 1.0
        for text in positive:
            group *= _share(stats, text)
        for text in negative:
            group *= 1.0 - _share(stats, text)
        none *= 1.0 - group
    return 1.0 - none


def prefer_bitmap(stats: TermStats, fraction: float, needed: int) -> bool:
    """True when reading every match (a ``fraction`` of the rows) costs less than walking the newest
    rows backwards until ``needed`` matches are found."""
    if fraction <= 0.0:
        return True
    return BITMAP_ROW_COST * fraction * stats.rows < needed / fraction
