"""The session list's filters: read from the query string, turned into ``list_sessions_rich`` arguments.

``/`` and ``/api/sessions`` take the same parameters: ``source``, ``q``
(title or id), ``archived`` (``exclude``, ``include`` or ``only``),
``pinned=1``, ``hidden=1`` (when the store has a hidden flag), ``from`` and
``to`` (UTC days, ``YYYY-MM-DD``, both included) and ``page``.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

__all__ = ["BadRequest", "ListFilters", "PAGE_SIZE", "day_bounds", "list_filters", "is_session_id", "page_number", "supports_hidden", "text_param"]

PAGE_SIZE = 50
ARCHIVED = ("exclude", "include", "only")
MAX_PAGE = 1_000_000


class BadRequest(ValueError):
    """A query parameter the viewer cannot use; the page says which (400)."""


def supports_hidden(db: Any) -> bool:
    """True when the store's ``list_sessions_rich`` takes ``include_hidden`` (stores with a hidden flag)."""
    try:
        return "include_hidden" in inspect.signature(db.list_sessions_rich).parameters
    except (TypeError, ValueError):
        return False


def _day(text: str, name: str) -> dt.date | None:
    if not text:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} must be a day like 2026-01-31, not {text!r}") from None


def _midnight(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.timezone.utc).timestamp()


def day_bounds(since: str, until: str) -> tuple[float | None, float | None]:
    """``[start, end)`` in epoch seconds for the UTC days ``since`` to ``until`` (both included; "" is open).

    The last day the calendar has (9999-12-31) leaves the end open rather than
    overflowing; ``from`` after ``to`` is a :class:`BadRequest` naming both.
    """
    first, last = _day(since, "from"), _day(until, "to")
    if first is not None and last is not None and first > last:
        raise BadRequest(f"from ({first.isoformat()}) must not be after to ({last.isoformat()})")
    start = None if first is None else _midnight(first)
    end = None if last is None or last == dt.date.max else _midnight(last + dt.timedelta(days=1))
    return start, end


def text_param(params: Mapping[str, str], name: str) -> str:
    """A text parameter, stripped; NUL (which no store keeps in text) is refused."""
    value = params.get(name, "").strip()
    if "\x00" in value:
        raise BadRequest(f"{name} must not contain NUL characters")
    return value


def is_session_id(text: str) -> bool:
    """Whether ``text`` can name a session at all (the store refuses blank ids and NUL)."""
    return bool(text.strip()) and "\x00" not in text


def page_number(text: str | None, name: str = "page", top: int = MAX_PAGE) -> int:
    """A 1-based number from the query string, at most ``top`` (400 naming ``name`` for anything else)."""
    if not text:
        return 1
    if not text.isdigit() or len(text) > 19 or not 1 <= int(text) <= top:
        raise BadRequest(f"{name} must be a number from 1 to {top}, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class ListFilters:
    source: str = ""
    q: str = ""
    archived: str = "exclude"
    pinned: bool = False
    hidden: bool = False
    since: str = ""
    until: str = ""
    page: int = 1

    def store_kwargs(self, *, hidden_supported: bool) -> dict[str, Any]:
        """Arguments for ``list_sessions_rich``: one row more than a page, to know whether another follows."""
        since, until = day_bounds(self.since, self.until)
        kwargs: dict[str, Any] = {
            "source": self.source or None,
            "limit": PAGE_SIZE + 1,
            "offset": (self.page - 1) * PAGE_SIZE,
            "include_archived": self.archived != "exclude",
            "archived_only": self.archived == "only",
            "pinned_only": self.pinned,
            "started_after": since,
            "started_before": until,
            "compact_rows": True,
        }
        if self.q:
            # The library matches titles and ids across compression chains in its activity order only.
            kwargs.update(order_by_last_active=True, search_query=self.q)
        if hidden_supported:
            kwargs["include_hidden"] = self.hidden
        return kwargs

    def href(self, path: str = "/", **changes: Any) -> str:
        """A link to ``path`` with these filters (and ``changes``); defaults are left out."""
        current = replace(self, **changes)
        pairs = [
            ("source", current.source), ("q", current.q),
            ("archived", "" if current.archived == "exclude" else current.archived),
            ("pinned", "1" if current.pinned else ""), ("hidden", "1" if current.hidden else ""),
            ("from", current.since), ("to", current.until), ("page", "" if current.page == 1 else str(current.page)),
        ]
        query = urlencode([(key, value) for key, value in pairs if value])
        return f"{path}?{query}" if query else path


def list_filters(params: Mapping[str, str]) -> ListFilters:
    """Validate the list's query parameters; raises :class:`BadRequest` naming the bad one."""
    archived = params.get("archived") or "exclude"
    if archived not in ARCHIVED:
        raise BadRequest(f"archived must be one of {', '.join(ARCHIVED)}, not {archived!r}")
    filters = ListFilters(
        source=text_param(params, "source"),
        q=text_param(params, "q"),
        archived=archived,
        pinned=params.get("pinned", "") not in ("", "0"),
        hidden=params.get("hidden", "") not in ("", "0"),
        since=text_param(params, "from"),
        until=text_param(params, "to"),
        page=page_number(params.get("page")),
    )
    filters.store_kwargs(hidden_supported=False)  # validates the days now, before any page is built
    return filters
