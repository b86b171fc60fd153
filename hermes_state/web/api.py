"""The JSON mirrors of the pages, bare: a list of sessions, one session with its messages, a list of hits."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .filters import PAGE_SIZE, BadRequest, is_session_id, list_filters, page_number, supports_hidden, text_param
from .hitcount import SEARCH_COUNT_CAP
from .pages import SEARCH_PAGE, search_with_count, session_total
from .render import json_response
from .transcript import message_id

__all__ = ["sessions_api", "session_api", "search_api", "API_MESSAGES", "API_MESSAGES_MAX"]

API_MESSAGES = 1000
API_MESSAGES_MAX = 10_000


def _error(status: int, detail: str) -> Response:
    return json_response({"error": detail}, status)


def _limit(text: str | None) -> int:
    if not text:
        return API_MESSAGES
    if not text.isdigit() or not 1 <= int(text) <= API_MESSAGES_MAX:
        raise BadRequest(f"limit must be a number from 1 to {API_MESSAGES_MAX}, not {text!r}")
    return int(text)


async def sessions_api(request: Request) -> Response:
    """``GET /api/sessions``: the rows of ``/`` with the same filters (``list_sessions_rich`` shape).

    The ``X-Total-Count`` header says how many sessions match (left out for a title search ``q``).
    """
    db: Any = request.app.state.db
    try:
        filters = list_filters(request.query_params)
    except BadRequest as exc:
        return _error(400, str(exc))
    hidden = supports_hidden(db)
    rows = await db.list_sessions_rich(**filters.store_kwargs(hidden_supported=hidden))
    response = json_response(rows[:PAGE_SIZE])
    total = await session_total(db, filters, hidden)
    if total is not None:
        response.headers["x-total-count"] = str(total)
    return response


async def session_api(request: Request) -> Response:
    """``GET /api/sessions/<id>``: ``{"session": get_session, "messages": get_messages rows}``.

    Messages in id order, inactive ones included (``active``/``compacted``
    say which); ``after=ID`` and ``limit=N`` page through long transcripts.
    """
    db: Any = request.app.state.db
    session_id = request.path_params["session_id"]
    try:
        after = message_id(request.query_params.get("after"), "after")
        limit = _limit(request.query_params.get("limit"))
    except BadRequest as exc:
        return _error(400, str(exc))
    session = await db.get_session(session_id) if is_session_id(session_id) else None
    if session is None:
        return _error(404, f"no session with the id {session_id!r}")
    messages = await db.get_messages(session_id, include_inactive=True, limit=limit, after_id=after)
    return json_response({"session": session, "messages": messages})


async def search_api(request: Request) -> Response:
    """``GET /api/search?q=``: ``search_messages`` hits (each with ``session_id``), ``page=`` for more.

    ``X-Total-Count`` says how many messages match over all pages, as on ``/api/sessions``; counting
    stops at ``SEARCH_COUNT_CAP`` (1,000), and a count that reached it also sends ``X-Total-Count-Capped: 1``;
    later pages of a query reuse its count for up to 30 s.
    """
    try:
        query = text_param(request.query_params, "q")
        page = page_number(request.query_params.get("page"))
    except BadRequest as exc:
        return _error(400, str(exc))
    if not query:
        response = json_response([])
        response.headers["x-total-count"] = "0"
        return response
    hits, total = await search_with_count(request, query, page, SEARCH_PAGE)
    response = json_response(hits)
    response.headers["x-total-count"] = str(total)
    if total >= SEARCH_COUNT_CAP:
        response.headers["x-total-count-capped"] = "1"
    return response
