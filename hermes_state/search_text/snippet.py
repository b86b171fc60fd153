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
from bisect import bisect_left
from functools import partial
from collections.abc import Sequence
from itertools import islice

from .sanitize import OPERATORS

__all__ = [
    "MAX_FTS5_SNIPPET_HITS",
    "SNIPPET_TOKENS",
    "bounded_snippet",
    "hits_exceed",
    "literal_snippet",
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
    if token is _CHAR:  # every character is a token
        return max(start, min(start + count, len(text)))
    end = start
    for found in islice(token.finditer(text, start), count):
        end = found.end()
    return end


def _start_before(token: re.Pattern[str], text: str, position: int, count: int) -> int:
    """Start of the ``count``-th token before ``position`` (within a bounded look-back)."""
    if count <= 0:
        return position
    floor = max(0, position - _LOOKBACK_CHARS)
    if token is _CHAR:
        return max(position - count, floor)
    earlier = list(token.finditer(text, floor, position))
    return earlier[-count].start() if len(earlier) >= count else (earlier[0].start() if earlier else position)


class _WordEnds:
    """:func:`_end_after` for word tokens, from one pass over the tokens around the first hits.

    The window search asks for the end of 40 tokens from each of up to 16
    anchors, mostly over the same stretch of text; tokenizing it once (and only
    as far as asked) instead of once per anchor keeps a snippet's cost near one
    pass. A start that is not a token start of this pass is answered directly.
    """

    def __init__(self, text: str, first: int) -> None:
        self._text = text
        self._tokens = _WORD.finditer(text, first)
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._done = False

    def _fill(self, index: int) -> None:
        while not self._done and len(self._starts) <= index:
            found = next(self._tokens, None)
            if found is None:
                self._done = True
            else:
                self._starts.append(found.start())
                self._ends.append(found.end())

    def end_after(self, start: int, count: int) -> int:
        if count <= 0:
            return start
        starts = self._starts
        while not self._done and (not starts or starts[-1] < start):
            self._fill(len(starts))
        index = bisect_left(starts, start)
        if index == len(starts) or starts[index] != start:
            return _end_after(_WORD, self._text, start, count)
        self._fill(index + count - 1)
        return self._ends[min(index + count, len(starts)) - 1]


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
    if token is _WORD:
        ends = _WordEnds(text, max(0, hits[0].start() - _LOOKBACK_CHARS)).end_after
    else:
        ends = partial(_end_after, _CHAR, text)
    best_score, first, end = -1, 0, 0
    # With one phrase every anchor scores the same, so the first hit starts the window.
    for index, anchor in enumerate(hits[: _ANCHORS if len(pattern.groupindex) > 1 else 1]):
        window_end = ends(anchor.start(), tokens)
        score = len({hit.lastgroup for hit in hits[index:] if hit.start() < window_end})
        if score > best_score:
            best_score, first, end = score, index, window_end
    inside = [hit for hit in hits[first:] if hit.end() <= end]
    if not inside:
        covered = 0
    elif token is _CHAR:
        covered = inside[-1].end() - inside[0].start()
    else:
        covered = sum(1 for _ in token.finditer(text, inside[0].start(), inside[-1].end()))
    start = _start_before(token, text, hits[first].start(), (tokens - covered) // 2)
    end = ends(start, tokens)
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


# Characters around a literal match's hits (the LIKE routes' snippet width).
LITERAL_SNIPPET_CHARS = 120


def literal_snippet(texts: Sequence[str], terms: Sequence[str]) -> str | None:
    """The literal route's snippet: up to 120 characters around the first hits of ``terms``
    in the first of ``texts`` holding one, hits in ``>>>``/``<<<``.

    Case-insensitive like the match itself. When no text shows a hit (it lies
    past the part read), the start of the first non-empty text, unmarked.
    """
    quoted = " ".join('"' + term.replace('"', '""') + '"' for term in terms)
    pattern = phrase_pattern(quoted, True)
    if pattern is not None:
        for text in texts:
            found = bounded_snippet(text, pattern, True, LITERAL_SNIPPET_CHARS)
            if found is not None:
                return found
    return next((text[:LITERAL_SNIPPET_CHARS] for text in texts if text), None)
