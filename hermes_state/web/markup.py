"""Stored text turned into HTML on the server: markdown (markdown-it-py) and syntax highlighting (Pygments).

Both produce HTML from text without ever passing stored markup through:
markdown-it runs with raw HTML off (``<b>`` in a message is shown as the
characters ``<b>``), images off (a remote image would be a request to another
host), and its link check, which refuses ``javascript:``, ``vbscript:``,
``file:`` and ``data:`` targets (such a link stays text). Pygments escapes
everything it emits and marks tokens with classes only; the colours come from
the stylesheet it generates (:func:`highlight_css`), served as a file, so the
Content-Security-Policy keeps forbidding inline styles.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import JsonLexer, get_lexer_by_name
from pygments.util import ClassNotFound

__all__ = ["markdown_html", "code_html", "json_html", "highlight_css", "HIGHLIGHT_MAX"]

# Past this size code is shown without colours: some lexers slow down badly on huge input.
HIGHLIGHT_MAX = 100_000
_FORMATTER = HtmlFormatter(nowrap=True)
_JSON = JsonLexer(stripnl=False, ensurenl=False)


@lru_cache(maxsize=256)
def _lexer(name: str) -> Lexer | None:
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=False)
    except (ClassNotFound, ValueError):
        return None


def _colour(code: str, lexer: Lexer | None) -> str:
    """Escaped code with Pygments' token spans (plain escaped text without a lexer or when too long)."""
    if lexer is None or len(code) > HIGHLIGHT_MAX:
        return str(escape(code))
    out = highlight(code, lexer, _FORMATTER)
    # Some lexers end every output with a newline; the text shown (and copied) is the text stored.
    return out[:-1] if out.endswith("\n") and not code.endswith("\n") else out


def code_html(code: str, language: str = "") -> Markup:
    """A ``<pre class="code">`` block, coloured when ``language`` names a lexer Pygments knows."""
    lexer = _lexer(language.strip().lower()) if language.strip() else None
    return Markup(f'<pre class="code hl">{_colour(code, lexer)}</pre>')


def json_html(text: str) -> Markup:
    """JSON text (already pretty-printed) as a coloured ``<pre class="json">`` block."""
    return Markup(f'<pre class="json hl">{_colour(text, _JSON)}</pre>')


def _fence(code: str, language: str, _attrs: str) -> str:
    return str(code_html(code, language))


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "highlight": _fence, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.disable("image")

    def link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(self.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    return md


_MARKDOWN = _parser()


def markdown_html(text: str) -> Markup:
    """``text`` as markdown rendered to HTML (CommonMark plus tables and strikethrough), stored HTML kept as text."""
    return Markup(f'<div class="md">{_MARKDOWN.render(text)}</div>')


def highlight_css() -> str:
    """The stylesheet of the token classes: a light palette, and a dark one under ``prefers-color-scheme: dark``."""
    light = HtmlFormatter(style="default").get_style_defs(".hl")
    dark = HtmlFormatter(style="monokai").get_style_defs(".hl")
    # Only the token colours: the blocks' own background comes from style.css in both schemes.
    keep = lambda css: "\n".join(line for line in css.splitlines() if line.startswith(".hl .")) # noqa: E731
    return f"{keep(light)}\n@media (prefers-color-scheme: dark) {{\n{keep(dark)}\n}}\n"
