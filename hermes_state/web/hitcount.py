"""How many messages a search finds, asked alongside the page's hits and remembered briefly per query.

On SQLite the store runs searches on one reader connection at a time (plain
reads keep the others), so the count waits for the page's search: a first
view costs about twice the search. Paging through the same query then reuses
the count for ``TTL_SECONDS`` instead of paying it again on every page.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

__all__ = ["HitCounts", "SEARCH_COUNT_CAP", "TTL_SECONDS"]

# Counting stops here: past it the page says "1,000+ matches" (a very common word costs no more).
SEARCH_COUNT_CAP = 1000
# How long a count stands for later pages of the same query (writes by other processes show up after it).
TTL_SECONDS = 30.0
_KEPT = 256


class HitCounts:
    """Recent ``count_search_matches`` results, keyed by query, at most ``_KEPT`` of them."""

    def __init__(self) -> None:
        self._counts: OrderedDict[str, tuple[float, int]] = OrderedDict()

    async def search(
        self, db: Any, query: str, offset: int, limit: int, **kwargs: Any
    ) -> tuple[list[dict[str, Any]], int]:
        """``(hits, total)``: ``limit`` hits of ``search_messages`` from ``offset`` and how many there are over
        all pages (at most ``SEARCH_COUNT_CAP``, below it never fewer than these hits reach); an unknown count
        is asked concurrently with the hits."""
        now = time.monotonic()
        known = self._counts.get(query)
        search = db.search_messages(query, limit=limit, offset=offset, **kwargs)
        if known is not None and now - known[0] < TTL_SECONDS:
            hits, total = await search, known[1]
        else:
            hits, total = await asyncio.gather(search, db.count_search_matches(query, cap=SEARCH_COUNT_CAP))
            self._counts[query] = (now, total)
            self._counts.move_to_end(query)
            while len(self._counts) > _KEPT:
                self._counts.popitem(last=False)
        # A count taken before later writes can trail the hits in hand (a capped one stays "cap or more").
        if hits and total < SEARCH_COUNT_CAP:
            total = min(max(total, offset + len(hits)), SEARCH_COUNT_CAP)
        return hits, total
