"""The viewer as an ASGI application: routes, error pages, and the guards around them.

:func:`create_app` takes an open (or openable) read-only ``SessionDB`` of
either backend; the app only reads through its public API, on the event
loop it runs on. The server (``hermes_state.web.server``) owns the store's
lifetime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .api import search_api, session_api, sessions_api
from .hitcount import HitCounts
from .pages import highlight_stylesheet, search_page, session_page, sessions_page, tail_fragment, usage_page
from .render import Renderer
from .security import ASGIApp, Guard, HostRule, TokenGate

__all__ = ["create_app", "STATIC"]

STATIC = Path(__file__).resolve().parent / "static"


async def _not_found(request: Request, exc: Exception) -> Response:
    detail = getattr(exc, "detail", None) or "no such page"
    if request.url.path.startswith("/api/"):
        from .render import json_response

        return json_response({"error": str(detail)}, getattr(exc, "status_code", 404))
    renderer: Renderer = request.app.state.renderer
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    return renderer.html("error.html", status, request=request, title="Not found" if status == 404 else "Error",
                         detail=str(detail))


async def _server_error(request: Request, exc: Exception) -> Response:
    renderer: Renderer = request.app.state.renderer
    return renderer.html("error.html", 500, request=request, title="The store could not answer",
                         detail=f"{type(exc).__name__}: {exc}")


def create_app(
    db: Any, *, token: str | None = None, cookie_name: str = "hermes_state_token", host: str = "127.0.0.1"
) -> ASGIApp:
    """The viewer over ``db``, answering requests addressed to ``host`` (or a loopback name).

    With ``token`` every request needs it (a Bearer header, a cookie, or ``?token=``).
    """
    routes = [
        Route("/", sessions_page),
        Route("/sessions/{session_id:path}", session_page),
        Route("/tail", tail_fragment),
        Route("/search", search_page),
        Route("/usage", usage_page),
        Route("/api/sessions", sessions_api),
        Route("/api/sessions/{session_id:path}", session_api),
        Route("/api/search", search_api),
        Route("/assets/highlight.css", highlight_stylesheet),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found, Exception: _server_error})
    app.state.db = db
    app.state.renderer = Renderer()
    app.state.hit_counts = HitCounts()
    inner: ASGIApp = app if token is None else TokenGate(app, token, cookie_name)
    return Guard(inner, HostRule(host))
