"""A transcript page: up to ``MESSAGE_PAGE`` rows, as numbered pages or found by keyset paging on message ids.

``page=N`` opens page N of M (offset paging over every row, inactive ones
included, so page numbers match ``message_count``); ``n=N`` is the page that
holds the Nth message and ``at=ID`` the page that holds that message (where
search hits link to; its position is found by bisecting on offsets).
``after=ID`` pages forwards (``get_messages(after_id=)``) and ``before=ID``
backwards (``get_messages(before_id=, latest=True)``) from older links.
Every page holds inactive rows too (compacted or rewound), so compaction
boundaries and the archived originals are on the page where they happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .filters import BadRequest

__all__ = [
    "MESSAGE_PAGE", "TAIL_ROWS", "TranscriptPage", "message_id", "numbered_page", "page_count", "page_holding", "transcript_page",
]

MESSAGE_PAGE = 100
TAIL_ROWS = 200


@dataclass
class TranscriptPage:
    rows: list[dict[str, Any]]
    earlier: int | None  # ``before=`` of the previous page, when there is one
    later: int | None  # ``after=`` of the next page, when there is one
    number: int | None = None  # N of "page N of M" (None on a keyset page)
    pages: int = 1  # M
    total: int = 0  # rows of the session, inactive ones included

    @property
    def last_id(self) -> int:
        """The newest id shown (0 for none): where the live tail continues."""
        return int(self.rows[-1]["id"]) if self.rows else 0

    @property
    def first_id(self) -> int:
        """The oldest id shown (0 for none)."""
        return int(self.rows[0]["id"]) if self.rows else 0

    @property
    def is_last(self) -> bool:
        """Whether no row follows this page (new ones are appended here live)."""
        return self.later is None

    @property
    def first_ordinal(self) -> int:
        """The 1-based position of the first row in the session (numbered pages only; 0 otherwise)."""
        return (self.number - 1) * MESSAGE_PAGE + 1 if self.number is not None and self.rows else 0


def page_count(total: int) -> int:
    """How many pages ``total`` rows make (at least one)."""
    return max(1, -(-total // MESSAGE_PAGE))


def message_id(text: str | None, name: str) -> int | None:
    """A message id from the query string (400 for anything but a non-negative integer)."""
    if text is None or text == "":
        return None
    if not text.isdigit() or len(text) > 19 or int(text) > 2**63 - 1:
        raise BadRequest(f"{name} must be a message id (a non-negative integer), not {text!r}")
    return int(text)


async def _forward(db: Any, session_id: str, after: int | None) -> TranscriptPage:
    rows = await db.get_messages(session_id, include_inactive=True, limit=MESSAGE_PAGE + 1, after_id=after)
    more = len(rows) > MESSAGE_PAGE
    rows = rows[:MESSAGE_PAGE]
    earlier = None
    if after is not None and rows:
        older = await db.get_messages(session_id, include_inactive=True, limit=1, latest=True, before_id=rows[0]["id"])
        earlier = rows[0]["id"] if older else None
    return TranscriptPage(rows, earlier, rows[-1]["id"] if more and rows else None)


async def page_holding(db: Any, session_id: str, message: int, total: int) -> int:
    """The number of the page that holds ``message`` (or the row after it, were it not in the session).

    Rows come in id order, so the position is found by bisection on offsets:
    about log2(total) one-row reads instead of reading every row before it.
    """
    low, high = 0, total
    while low < high:
        middle = (low + high) // 2
        rows = await db.get_messages(session_id, include_inactive=True, limit=1, offset=middle)
        if rows and rows[0]["id"] < message:
            low = middle + 1
        else:
            high = middle
    return min(low, max(total - 1, 0)) // MESSAGE_PAGE + 1


async def numbered_page(db: Any, session_id: str, number: int, total: int) -> TranscriptPage:
    """Page ``number`` of the session's ``total`` rows (a number past the end opens the last page)."""
    pages = page_count(total)
    number = min(number, pages)
    rows = await db.get_messages(session_id, include_inactive=True, limit=MESSAGE_PAGE, offset=(number - 1) * MESSAGE_PAGE)
    earlier = rows[0]["id"] if rows and number > 1 else None
    later = rows[-1]["id"] if rows and number < pages else None
    return TranscriptPage(rows, earlier, later, number=number, pages=pages, total=total)


async def transcript_page(
    db: Any, session_id: str, *, after: int | None = None, before: int | None = None, total: int = 0
) -> TranscriptPage:
    """The keyset page asked for: ``before`` wins over ``after``; none is the first page."""
    page = await _keyset(db, session_id, after=after, before=before)
    page.total, page.pages = total, page_count(total)
    return page


async def _keyset(db: Any, session_id: str, *, after: int | None, before: int | None) -> TranscriptPage:
    if before is None:
        return await _forward(db, session_id, after)
    rows = await db.get_messages(session_id, include_inactive=True, limit=MESSAGE_PAGE + 1, latest=True, before_id=before)
    if not rows:
        return await _forward(db, session_id, None)
    more = len(rows) > MESSAGE_PAGE
    rows = rows[-MESSAGE_PAGE:]
    newer = await db.get_messages(session_id, include_inactive=True, limit=1, after_id=rows[-1]["id"])
    return TranscriptPage(rows, rows[0]["id"] if more else None, rows[-1]["id"] if newer else None)
