"""The session list's filters: read from the query string, turned into ``list_sessions_rich`` arguments.

``/`` and ``/api/sessions`` take the same parameters: ``source``, ``q``
(title or id), ``archived`` (``exclude``, ``include`` or ``only``),
``pinned=1``, ``hidden=1`` (when the store has a hidden flag), ``from`` and
``to`` (UTC days, ``YYYY-MM-DD``, both included), ``model`` (exact),
``tool`` (a tool the session used), ``min_cost`` (dollars),
``min_messages``, ``sort`` (``started``, ``last_active``, ``cost`` or
``messages``) and ``page``.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "BadRequest", "ListFilters", "PAGE_SIZE", "SORTS", "day_bounds", "list_filters", "is_session_id", "page_number",
    "supports_hidden", "text_param",
]

PAGE_SIZE = 50
ARCHIVED = ("exclude", "include", "only")
SORTS = {"started": "newest first", "last_active": "last active", "cost": "costliest", "messages": "most messages"}
MAX_MESSAGES = 2**31 - 1
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


def _cost(text: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e12:  # NaN fails both comparisons
        raise BadRequest(f"min_cost must be an amount of dollars like 0.5, not {text!r}")
    return value


def _count(text: str) -> int:
    if not text:
        return 0
    if not text.isdigit() or len(text) > 10 or int(text) > MAX_MESSAGES:
        raise BadRequest(f"min_messages must be a whole number from 0 to {MAX_MESSAGES}, not {text!r}")
    return int(text)


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
    model: str = ""
    tool: str = ""
    min_cost: str = ""
    min_messages: str = ""
    sort: str = "started"

    @property
    def effective_sort(self) -> str:
        """The order the rows come in: a title search is always most recently active first."""
        return "last_active" if self.q else self.sort

    def narrowing(self, hidden_supported: bool) -> dict[str, Any]:
        """The filters ``list_sessions_rich`` and ``session_count`` share, as keyword arguments."""
        since, until = day_bounds(self.since, self.until)
        kwargs: dict[str, Any] = {
            "source": self.source or None,
            "include_archived": self.archived != "exclude",
            "archived_only": self.archived == "only",
            "pinned_only": self.pinned,
            "started_after": since,
            "started_before": until,
            "model": self.model or None,
            "tool_name": self.tool or None,
            "min_cost": _cost(self.min_cost),
            "min_message_count": _count(self.min_messages),
        }
        if hidden_supported:
            kwargs["include_hidden"] = self.hidden
        return kwargs

    def store_kwargs(self, *, hidden_supported: bool) -> dict[str, Any]:
        """Arguments for ``list_sessions_rich``: one row more than a page, to know whether another follows."""
        kwargs = self.narrowing(hidden_supported)
        kwargs.update(limit=PAGE_SIZE + 1, offset=(self.page - 1) * PAGE_SIZE, compact_rows=True)
        if self.q:
            # The library matches titles and ids across compression chains in its activity order only.
            kwargs.update(order_by_last_active=True, search_query=self.q)
        elif self.sort == "last_active":
            kwargs["order_by_last_active"] = True
        elif self.sort != "started":
            kwargs["sort"] = self.sort
        return kwargs

    def href(self, path: str = "/", **changes: Any) -> str:
        """A link to ``path`` with these filters (and ``changes``); defaults are left out."""
        current = replace(self, **changes)
        pairs = [
            ("source", current.source), ("q", current.q),
            ("archived", "" if current.archived == "exclude" else current.archived),
            ("pinned", "1" if current.pinned else ""), ("hidden", "1" if current.hidden else ""),
            ("from", current.since), ("to", current.until), ("model", current.model), ("tool", current.tool),
            ("min_cost", current.min_cost), ("min_messages", current.min_messages),
            ("sort", "" if current.sort == "started" else current.sort),
            ("page", "" if current.page == 1 else str(current.page)),
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
        model=text_param(params, "model"),
        tool=text_param(params, "tool"),
        min_cost=text_param(params, "min_cost"),
        min_messages=text_param(params, "min_messages"),
        sort=params.get("sort") or "started",
    )
    if filters.sort not in SORTS:
        raise BadRequest(f"sort must be one of {', '.join(SORTS)}, not {filters.sort!r}")
    filters.store_kwargs(hidden_supported=False)  # validates the days and numbers now, before any page is built
    return filters
