"""The HTML pages: the session list, a transcript, search, usage, and the live tail of a transcript.

Each handler reads through the public ``SessionDB`` API of the store in
``request.app.state.db`` and renders a template; nothing here writes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .chart import METRICS, day_chart
from .filters import (
    PAGE_SIZE, SORTS, BadRequest, ListFilters, day_bounds, is_session_id, list_filters, page_number, supports_hidden, text_param,
)
from .hitcount import SEARCH_COUNT_CAP, HitCounts
from .markup import highlight_css
from .outline import outline, search_session
from .trace import turn_costs, turns
from .transcript import MESSAGE_PAGE, TAIL_ROWS, TranscriptPage, message_id, numbered_page, page_holding, transcript_page
from .views import message_view, segments, session_href, snippet_parts, when

__all__ = [
    "highlight_stylesheet", "sessions_page", "session_page", "search_page", "usage_page", "tail_fragment", "session_total",
    "SEARCH_PAGE", "SEARCH_FIELDS", "search_with_count",
]

SEARCH_PAGE = 20
# What the search page shows of a hit (the surrounding messages are one click away).
SEARCH_FIELDS = ("id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model")
USAGE_DAYS = 30


def _db(request: Request) -> Any:
    return request.app.state.db


def _render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    return request.app.state.renderer.html(name, status, request=request, **context)


def bad_request(request: Request, exc: Exception) -> Response:
    return _render(request, "error.html", 400, title="Bad request", detail=str(exc))


def not_found(request: Request, detail: str) -> Response:
    return _render(request, "error.html", 404, title="Not found", detail=detail)


async def session_total(db: Any, filters: ListFilters, hidden: bool) -> int | None:
    """How many sessions the list's filters match (None for a title search, which the store cannot count)."""
    if filters.q:
        return None
    return int(await db.session_count(exclude_children=True, **filters.narrowing(hidden)))


async def search_with_count(request: Request, query: str, page: int, limit: int, **kwargs: Any) -> tuple[list[dict[str, Any]], int]:
    """``(hits, total)``: ``limit`` hits from page ``page`` of the results and how many there are over all pages."""
    counts: HitCounts = request.app.state.hit_counts
    return await counts.search(_db(request), query, (page - 1) * SEARCH_PAGE, limit, **kwargs)


def _session_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listed session with what its row shows: label, start and last-activity times, cost."""
    started, iso = when(row.get("started_at"))
    active, active_iso = when(row.get("last_active"))
    cost = row.get("actual_cost_usd")
    return {
        **row,
        "label": row.get("title") or row["id"],
        "started": started,
        "started_iso": iso,
        "active": active,
        "active_iso": active_iso,
        "cost": cost if cost else row.get("estimated_cost_usd"),
    }


async def sessions_page(request: Request) -> Response:
    db = _db(request)
    try:
        filters = list_filters(request.query_params)
    except BadRequest as exc:
        return bad_request(request, exc)
    hidden = supports_hidden(db)
    rows = await db.list_sessions_rich(**filters.store_kwargs(hidden_supported=hidden))
    more = len(rows) > PAGE_SIZE  # one row more than a page was asked for
    shown = [_session_row(row) for row in rows[:PAGE_SIZE]]
    sources = sorted(await db.session_count_by_source(include_archived=True))
    total = await session_total(db, filters, hidden)
    return _render(
        request, "sessions.html",
        filters=filters, rows=shown, sources=sources, hidden_supported=hidden, sorts=SORTS,
        total=total, pages=None if total is None else max(1, -(-total // PAGE_SIZE)),
        prev_href=filters.href(page=filters.page - 1) if filters.page > 1 else None,
        next_href=filters.href(page=filters.page + 1) if more else None,
    )


_HIGHLIGHT_CSS = highlight_css()


async def highlight_stylesheet(request: Request) -> Response:
    """``/assets/highlight.css``: the colours of Pygments' token classes (a file, so no inline style is needed)."""
    return Response(_HIGHLIGHT_CSS, media_type="text/css")


async def _whole_message(request: Request, session: dict[str, Any], message: int) -> Response:
    """One message with every block whole (where a cut fold links to)."""
    rows = await _db(request).get_messages(session["id"], include_inactive=True, limit=1, after_id=message - 1)
    if not rows or rows[0]["id"] != message:
        return not_found(request, f"no message {message} in the session {session['id']!r}")
    return _render(request, "message.html", session=session, m=message_view(rows[0], fold=False))


def _jump(request: Request, page: TranscriptPage, n: int) -> Response:
    """``?n=N``: a redirect to the numbered page holding the Nth message, at its anchor."""
    index = min(n, page.total) - page.first_ordinal
    anchor = f"#m{page.rows[index]['id']}" if page.rows and 0 <= index < len(page.rows) else ""
    return RedirectResponse(f"{session_href(request.path_params['session_id'])}?page={page.number}{anchor}", 303)


async def session_page(request: Request) -> Response:
    db = _db(request)
    session_id = request.path_params["session_id"]
    try:
        at = message_id(request.query_params.get("at"), "at")
        before = message_id(request.query_params.get("before"), "before")
        after = message_id(request.query_params.get("after"), "after")
        full = message_id(request.query_params.get("full"), "full")
        number = page_number(request.query_params.get("page")) if request.query_params.get("page") else None
        n = page_number(request.query_params.get("n"), "n", 2**62) if request.query_params.get("n") else None
        query = text_param(request.query_params, "q")
        view_mode = request.query_params.get("view") or "messages"
        if view_mode not in ("messages", "trace"):
            raise BadRequest(f"view must be messages or trace, not {view_mode!r}")
        marks = [text for text in request.query_params.getlist("hl") if text.strip() and "\x00" not in text][:10]
    except BadRequest as exc:
        return bad_request(request, exc)
    session = await db.get_session(session_id) if is_session_id(session_id) else None
    if session is None:
        return not_found(request, f"no session with the id {session_id!r}")
    if full:
        return await _whole_message(request, session, full)
    total = await db.message_count(session_id)
    if n is not None:
        number = (min(n, max(total, 1)) - 1) // MESSAGE_PAGE + 1
    elif at is not None and number is None:
        number = await page_holding(db, session_id, at, total)
    if number is not None or (before is None and after is None):
        page = await numbered_page(db, session_id, number or 1, total)
        if n is not None:
            return _jump(request, page, n)
    else:
        page = await transcript_page(db, session_id, after=after, before=before, total=total)
    views = [message_view(row) for row in page.rows]
    for view in views:
        view.open = bool(marks) and view.id == at
    trace = turns(views)
    turn_costs(trace, session)
    parent_id = session.get("parent_session_id")
    parent = await db.get_session(parent_id) if parent_id else None
    lineage = await db.get_compression_lineage(session_id)
    chain = await _chain_totals(db, lineage) if len(lineage) > 1 else None
    newest = page.last_id if page.is_last else await _newest_id(db, session_id)
    started, _ = when(session.get("started_at"))
    ended, _ = when(session.get("ended_at"))
    return _render(
        request, "session.html",
        session=session, started=started, ended=ended,
        parent=parent, parent_id=parent_id,
        lineage=lineage if len(lineage) > 1 else [], chain=chain,
        children=await db.get_child_sessions(session_id),
        usage=await db.get_session_model_usage(session_id),
        segments=segments(views), outline=outline(views), turns=trace, view=view_mode,
        page=page, at=at, newest=newest, inactive=total - int(session.get("message_count") or 0),
        query=query, found=await search_session(db, session_id, query) if query else None,
    )


async def _newest_id(db: Any, session_id: str) -> int:
    rows = await db.get_messages(session_id, include_inactive=True, limit=1, latest=True)
    return int(rows[-1]["id"]) if rows else 0


_CHAIN_SUMMED = ("message_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                 "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd", "api_call_count", "tool_call_count")


async def _chain_totals(db: Any, lineage: list[str]) -> dict[str, Any]:
    """Tokens, cost and counts summed over every session of a compression chain (those still in the store)."""
    totals: dict[str, Any] = dict.fromkeys(_CHAIN_SUMMED, 0)
    totals["sessions"] = 0
    for sid in lineage:
        row = await db.get_session(sid)
        if row is None:
            continue
        totals["sessions"] += 1
        for name in _CHAIN_SUMMED:
            totals[name] += row.get(name) or 0
    return totals


async def _archived_since(db: Any, session_id: str, first: int, last: int) -> list[str]:
    """``id:c`` (archived by compaction) or ``id:r`` (rewound) for each inactive row with an id in ``[first, last]``."""
    rows = await db.get_messages(session_id, include_inactive=True, limit=1000, after_id=max(first - 1, 0))
    return [f"{row['id']}:{'c' if row.get('compacted') else 'r'}" for row in rows
            if row["id"] <= last and not row.get("active", 1)]


async def tail_fragment(request: Request) -> Response:
    """What changed in a session since a page was rendered (204 when nothing).

    New messages after ``after=ID`` come as list items; when the session's
    count of inactive rows differs from ``inactive=N``, the ``x-archived``
    header lists the rows between ``first`` and ``last`` that a compaction or
    rewind made inactive, and ``x-inactive`` the new count.
    """
    db = _db(request)
    try:
        session_id = text_param(request.query_params, "session")
        after = message_id(request.query_params.get("after"), "after") or 0
        first = message_id(request.query_params.get("first"), "first") or 0
        last = message_id(request.query_params.get("last"), "last") or after
        known = message_id(request.query_params.get("inactive"), "inactive")
    except BadRequest as exc:
        return bad_request(request, exc)
    if not is_session_id(session_id):
        return bad_request(request, BadRequest("session must be a session id"))
    headers: dict[str, str] = {}
    if known is not None:
        session = await db.get_session(session_id)
        inactive = await db.message_count(session_id) - int((session or {}).get("message_count") or 0)
        if inactive != known:
            headers["x-inactive"] = str(inactive)
            if first:
                headers["x-archived"] = ",".join(await _archived_since(db, session_id, first, last))
    rows = await db.get_messages(session_id, include_inactive=True, limit=TAIL_ROWS, after_id=after)
    if not rows and not headers:
        return Response(status_code=204)
    response = _render(request, "tail.html", messages=[message_view(row) for row in rows])
    if rows:
        headers["x-last-id"] = str(rows[-1]["id"])
    response.headers.update(headers)
    return response


async def search_page(request: Request) -> Response:
    try:
        query = text_param(request.query_params, "q")
        page = page_number(request.query_params.get("page"))
    except BadRequest as exc:
        return bad_request(request, exc)
    hits: list[dict[str, Any]] = []
    total = 0
    if query:
        hits, total = await search_with_count(request, query, page, SEARCH_PAGE + 1, fields=SEARCH_FIELDS)
    more = len(hits) > SEARCH_PAGE
    shown = []
    for hit in hits[:SEARCH_PAGE]:
        parts = snippet_parts(hit.get("snippet"))
        # The words the store matched, for the transcript to open the fold holding them and mark them.
        marked = list(dict.fromkeys(part["text"].strip() for part in parts if part["hit"] and part["text"].strip()))[:10]
        link = [("at", hit["id"]), *(("hl", word) for word in marked or [query])]
        shown.append({**hit, "when": when(hit.get("timestamp"))[0], "snippet_parts": parts, "link": link})
    first = (page - 1) * SEARCH_PAGE + 1
    capped = total >= SEARCH_COUNT_CAP
    return _render(request, "search.html", query=query, hits=shown, page=page, more=more, first=first,
                   last=first + len(shown) - 1, total=total, capped=capped, pages=max(1, -(-total // SEARCH_PAGE)))


def _usage_window(request: Request) -> tuple[str, str]:
    today = dt.datetime.now(dt.timezone.utc).date()
    since = text_param(request.query_params, "from") or (today - dt.timedelta(days=USAGE_DAYS - 1)).isoformat()
    until = text_param(request.query_params, "to") or today.isoformat()
    return since, until


async def usage_page(request: Request) -> Response:
    db = _db(request)
    metric = request.query_params.get("metric") or "cost"
    try:
        if metric not in METRICS:
            raise BadRequest(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
        since, until = _usage_window(request)
        start, end = day_bounds(since, until)
    except BadRequest as exc:
        return bad_request(request, exc)
    rows = await db.usage_by_day(since=start, until=end)
    return _render(
        request, "usage.html",
        rows=rows, since=since, until=until, metric=metric, metrics=METRICS,
        chart=day_chart(rows, metric), per_day=_totals(rows, "day"), per_model=_totals(rows, "model"),
    )


_SUMMED = ("sessions", "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd")


def _totals(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``usage_by_day`` rows summed per ``key`` (day or model); days oldest first, models costliest first."""
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        group = groups.setdefault(row[key], {key: row[key], **dict.fromkeys(_SUMMED, 0)})
        for name in _SUMMED:
            group[name] += row[name]
    ordered = sorted(groups.values(), key=lambda g: g[key])
    if key == "model":
        ordered.sort(key=lambda g: -g["estimated_cost_usd"])
    return ordered
