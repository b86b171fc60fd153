"""Templates and responses: Jinja2 with autoescaping on, so everything from the store is text on the page.

Every value a template prints goes through ``finalize``, which replaces
lone UTF-16 surrogates (which a stored string may hold and UTF-8 cannot
encode) with U+FFFD, so no page fails to encode, and shows invisible and
bidi control characters as labels (:mod:`.reveal`); then through Jinja's
HTML escaping. A value wrapped in :class:`Verbatim` (a form field's value,
an id a script sends back) keeps those characters. JSON responses escape non-ASCII (lone surrogates included) the
same way ``json.dumps`` does, so what the store holds comes back exactly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.responses import HTMLResponse, Response

from ..encoding import scrub_surrogates
from .reveal import reveal
from .views import CUT_CHARS, count, money, session_href

__all__ = ["Renderer", "Verbatim", "json_response", "TEMPLATES"]

TEMPLATES = Path(__file__).resolve().parent / "templates"


class Verbatim(str):
    """Text printed as stored (still escaped): for form values and ids that a script or form sends back."""


def _finalize(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if isinstance(value, Verbatim):
        return scrub_surrogates(value)
    shown = reveal(scrub_surrogates(value))
    # Markup (rendered markdown) stays markup: the labels hold no HTML-special character.
    return Markup(shown) if isinstance(value, Markup) else shown


def _json_default(value: Any) -> Any:
    """Bytes as base64 text (as the export writes them); anything else JSON cannot encode as its text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def json_response(value: Any, status: int = 200) -> Response:
    """``value`` as JSON, bare (not wrapped in another object)."""
    body = json.dumps(value, ensure_ascii=True, default=_json_default, allow_nan=False, separators=(",", ":"))
    return Response(body, status_code=status, media_type="application/json")


class Renderer:
    """Renders the package's templates into HTML responses."""

    def __init__(self, **globals_: Any) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            finalize=_finalize,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(session_href=session_href, money=money, count=count, cut_chars=CUT_CHARS, **globals_)
        self.env.filters["verbatim"] = lambda value: Verbatim(value) if isinstance(value, str) else value

    def html(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """The template ``name`` rendered with ``context``."""
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)
