"""Snippets whose cost does not grow with the square of a row's hits.

FTS5's ``snippet()`` scores a candidate fragment at every hit in the row and
each score walks the row's hits, so one row with many hits is quadratic: a
log line of 16,000 hits takes about a second, 80,000 hits half a minute, and
nothing can interrupt it (the whole call is one step of the statement).

The reader keeps ``snippet()`` for ordinary rows and uses :func:`bounded_snippet`
for rows where :func:`hits_exceed` finds more than :data:`MAX_FTS5_SNIPPET_HITS`
hits: the query's phrases become one regular expression, the first hits
choose the window, and only that window is tokenized. Same markers, same
ellipsis, the same 40-token budget; tokens approximate FTS5's (unicode61:
runs of letters and digits, case-insensitive; trigram and CJK indexes:
characters), so on such rows the window may differ slightly from what
``snippet()`` would pick. Pure functions, no SQL.
"""

from __future__ import annotations

import re
from itertools import islice

from .sanitize import OPERATORS

__all__ = [
    "MAX_FTS5_SNIPPET_HITS",
    "SNIPPET_TOKENS",
    "bounded_snippet",
    "hits_exceed",
    "phrase_pattern",
    "query_phrases",
]

SNIPPET_TOKENS = 40
# Below this many hits in a row, snippet() costs about a millisecond.
MAX_FTS5_SNIPPET_HITS = 200
OPEN, CLOSE, ELLIPSIS = ">>>", "<<<", "..."

_WORD = re.compile(r"[^\W_]+")
_CHAR = re.compile(r".", re.DOTALL)
_QUERY_ITEM = re.compile(r'"((?:[^"]|"")*)"(\*?)|(\S+)')
_BEFORE_TOKEN = r"(?<![^\W_])"
_AFTER_TOKEN = r"(?![^\W_])"
# Hits looked at to place the window, and candidate first hits of the window.
_HITS_SCANNED = 64
_ANCHORS = 16
# How far back from the window's first hit its leading tokens are looked for.
_LOOKBACK_CHARS = 4096


def query_phrases(match: str) -> list[tuple[str, bool]]:
    """(text, is_prefix) of each positive phrase of an FTS5 query, in order."""
    found: list[tuple[str, bool]] = []
    negate = False
    for item in _QUERY_ITEM.finditer(match):
        quoted, star, bare = item.groups()
        if bare is not None and bare.upper() in OPERATORS | {"NEAR"}:
            negate = bare.upper() == "NOT"
            continue
        if not negate:
            text = quoted.replace('""', '"') if quoted is not None else bare.rstrip("*")
            prefix = bool(star) if quoted is not None else bare.endswith("*")
            if text:
                found.append((text, prefix))
        negate = False
    return found


def phrase_pattern(match: str, substring: bool) -> re.Pattern[str] | None:
    """One case-insensitive pattern for the phrases of ``match``, a named group per phrase.

    ``substring`` (trigram and CJK indexes): each phrase is a literal
    substring. Otherwise each phrase is its words in order, separated by
    anything that is not a word, on token boundaries (a prefix phrase may
    run on). None when the query has no positive phrase.
    """
    parts = []
    for number, (text, prefix) in enumerate(query_phrases(match)):
        if substring:
            body = re.escape(text)
        else:
            words = _WORD.findall(text)
            if not words:
                continue
            body = _BEFORE_TOKEN + r"[\W_]+".join(map(re.escape, words)) + (r"[^\W_]*" if prefix else _AFTER_TOKEN)
        parts.append(f"(?P<p{number}>{body})")
    if not parts:
        return None
    return re.compile("|".join(parts), re.IGNORECASE)


def hits_exceed(pattern: re.Pattern[str], texts: list[str], limit: int = MAX_FTS5_SNIPPET_HITS) -> bool:
    """True when ``texts`` hold more than ``limit`` matches of ``pattern`` (stops counting there)."""
    seen = 0
    for text in texts:
        for _ in pattern.finditer(text):
            seen += 1
            if seen > limit:
                return True
    return False


def _end_after(token: re.Pattern[str], text: str, start: int, count: int) -> int:
    """End of the ``count``-th token starting at ``start`` (or of the last one before the text ends)."""
    end = start
    for found in islice(token.finditer(text, start), count):
        end = found.end()
    return end


def _start_before(token: re.Pattern[str], text: str, position: int, count: int) -> int:
    """Start of the ``count``-th token before ``position`` (within a bounded look-back)."""
    if count <= 0:
        return position
    earlier = list(token.finditer(text, max(0, position - _LOOKBACK_CHARS), position))
    return earlier[-count].start() if len(earlier) >= count else (earlier[0].start() if earlier else position)


def bounded_snippet(text: str, pattern: re.Pattern[str], substring: bool, tokens: int = SNIPPET_TOKENS) -> str | None:
    """A ``snippet()``-style fragment of ``text``: at most ``tokens`` tokens, hits in ``>>>``/``<<<``.

    The window starts at whichever of the first hits covers the most
    distinct phrases, then moves back to centre them as FTS5 does. Work is
    linear in the text up to the first hits and bounded after them. None
    when ``text`` holds no hit.
    """
    token = _CHAR if substring else _WORD
    hits = list(islice(pattern.finditer(text), _HITS_SCANNED))
    if not hits:
        return None
    best_score, first, end = -1, 0, 0
    for index, anchor in enumerate(hits[:_ANCHORS]):
        window_end = _end_after(token, text, anchor.start(), tokens)
        score = len({hit.lastgroup for hit in hits[index:] if hit.start() < window_end})
        if score > best_score:
            best_score, first, end = score, index, window_end
    inside = [hit for hit in hits[first:] if hit.end() <= end]
    covered = len(list(token.finditer(text, inside[0].start(), inside[-1].end()))) if inside else 0
    start = _start_before(token, text, hits[first].start(), (tokens - covered) // 2)
    end = _end_after(token, text, start, tokens)
    inside = [hit for hit in hits if hit.start() >= start and hit.end() <= end]
    parts = [ELLIPSIS] if token.search(text, max(0, start - _LOOKBACK_CHARS), start) or start > _LOOKBACK_CHARS else []
    cursor = start
    for hit in inside:
        parts += [text[cursor : hit.start()], OPEN, hit.group(), CLOSE]
        cursor = hit.end()
    parts.append(text[cursor:end])
    if token.search(text, end):
        parts.append(ELLIPSIS)
    return "".join(parts)
