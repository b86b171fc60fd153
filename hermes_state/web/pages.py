"""The HTML pages: the session list, a transcript, search, usage, and the live tail of a transcript.

Each handler reads through the public ``SessionDB`` API of the store in
``request.app.state.db`` and renders a template; nothing here writes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .chart import METRICS, day_chart
from .filters import PAGE_SIZE, BadRequest, day_bounds, is_session_id, list_filters, page_number, supports_hidden, text_param
from .transcript import TAIL_ROWS, message_id, transcript_page
from .markup import highlight_css
from .views import message_view, segments, snippet_parts, when

__all__ = ["highlight_stylesheet", "sessions_page", "session_page", "search_page", "usage_page", "tail_fragment", "SEARCH_PAGE", "SEARCH_FIELDS"]

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


def _session_row(row: dict[str, Any]) -> dict[str, Any]:
    """A listed session with what its row shows: label, start time, cost."""
    started, iso = when(row.get("started_at"))
    cost = row.get("actual_cost_usd")
    return {
        **row,
        "label": row.get("title") or row["id"],
        "started": started,
        "started_iso": iso,
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
    return _render(
        request, "sessions.html",
        filters=filters, rows=shown, sources=sources, hidden_supported=hidden,
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


async def session_page(request: Request) -> Response:
    db = _db(request)
    session_id = request.path_params["session_id"]
    try:
        at = message_id(request.query_params.get("at"), "at")
        before = message_id(request.query_params.get("before"), "before")
        after = message_id(request.query_params.get("after"), "after")
        full = message_id(request.query_params.get("full"), "full")
    except BadRequest as exc:
        return bad_request(request, exc)
    session = await db.get_session(session_id) if is_session_id(session_id) else None
    if session is None:
        return not_found(request, f"no session with the id {session_id!r}")
    if full:
        return await _whole_message(request, session, full)
    page = await transcript_page(db, session_id, after=after, before=before, at=at)
    parent_id = session.get("parent_session_id")
    parent = await db.get_session(parent_id) if parent_id else None
    lineage = await db.get_compression_lineage(session_id)
    started, _ = when(session.get("started_at"))
    ended, _ = when(session.get("ended_at"))
    return _render(
        request, "session.html",
        session=session, started=started, ended=ended,
        parent=parent, parent_id=parent_id,
        lineage=lineage if len(lineage) > 1 else [],
        children=await db.get_child_sessions(session_id),
        usage=await db.get_session_model_usage(session_id),
        segments=segments(message_view(row) for row in page.rows),
        page=page, live=page.later is None, at=at,
    )


async def tail_fragment(request: Request) -> Response:
    """New messages of a session after ``after=ID``, as list items for the open page (204 when none)."""
    db = _db(request)
    try:
        session_id = text_param(request.query_params, "session")
        after = message_id(request.query_params.get("after"), "after") or 0
    except BadRequest as exc:
        return bad_request(request, exc)
    if not is_session_id(session_id):
        return bad_request(request, BadRequest("session must be a session id"))
    rows = await db.get_messages(session_id, include_inactive=True, limit=TAIL_ROWS, after_id=after)
    if not rows:
        return Response(status_code=204)
    response = _render(request, "tail.html", messages=[message_view(row) for row in rows])
    response.headers["x-last-id"] = str(rows[-1]["id"])
    return response


async def search_page(request: Request) -> Response:
    db = _db(request)
    try:
        query = text_param(request.query_params, "q")
        page = page_number(request.query_params.get("page"))
    except BadRequest as exc:
        return bad_request(request, exc)
    hits = []
    if query:
        hits = await db.search_messages(query, limit=SEARCH_PAGE + 1, offset=(page - 1) * SEARCH_PAGE, fields=SEARCH_FIELDS)
    more = len(hits) > SEARCH_PAGE
    shown = [
        {**hit, "when": when(hit.get("timestamp"))[0], "snippet_parts": snippet_parts(hit.get("snippet"))}
        for hit in hits[:SEARCH_PAGE]
    ]
    return _render(request, "search.html", query=query, hits=shown, page=page, more=more)


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
