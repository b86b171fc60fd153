"""Turning a user's search text into something FTS5 (or LIKE) can run safely.

Pure functions, no SQL: the sanitizer of spec §4.2, the CJK tests that
decide routing (§4.3), and the tokenisers the trigram, LIKE and
stale-index paths use. Everything here is linear in the (already capped)
query length; no regular expression can backtrack badly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = [
    "MAX_FTS5_QUERY_CHARS",
    "OPERATORS",
    "BooleanGroup",
    "boolean_groups",
    "contains_cjk",
    "CJK_RANGES",
    "count_cjk",
    "gap_terms",
    "has_lone_cjk_run",
    "is_cjk_codepoint",
    "like_pattern",
    "literal_groups",
    "literal_prefilter",
    "literal_query",
    "searchable",
    "needs_literal",
    "plain_tokens",
    "quote_for_substring_index",
    "sanitize_fts5_query",
    "scrub_query",
    "trigram_eligible",
]

MAX_FTS5_QUERY_CHARS = 2048

# Bare operators the routing and LIKE paths recognise (case-insensitively, as
# the reference store does).
OPERATORS = frozenset({"AND", "OR", "NOT"})

# Characters FTS5 would read as syntax: column filter, grouping, boost,
# initial-token marker, phrase quote (only unmatched ones reach this table).
_SYNTAX_CHARS = '+{}():"^'
_SYNTAX_TO_SPACE = str.maketrans({c: " " for c in _SYNTAX_CHARS})
_STAR_RUN = re.compile(r"\*+")
_LEADING_STAR = re.compile(r"(^|\s)\*")
_LEADING_OPERATOR = re.compile(r"^(?:AND|OR|NOT)\b\s*", re.IGNORECASE)
_TRAILING_OPERATOR = re.compile(r"\s+(?:AND|OR|NOT)\s*$", re.IGNORECASE)
# A chain of word runs joined by single '.' or '-' characters. The pattern is
# deterministic ('.' and '-' are not word characters), so matching is linear.
_WORD_CHAIN = re.compile(r"(?<!\w)\w+(?:[.\-]\w+)*")
_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_query(text: str) -> str:
    """Make ``text`` bindable: lone surrogates become U+FFFD, NUL becomes a space."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    return text


def _needs_phrase(chain: str) -> bool:
    # FTS5's tokenizer would split "chat-send", "P2.2" or "snake_case" into
    # several terms; quoting keeps them one phrase.
    if "." in chain or "-" in chain:
        return True
    return "_" in chain[1:-1]


def _quote_compound_terms(text: str) -> str:
    return _WORD_CHAIN.sub(lambda m: f'"{m.group(0)}"' if _needs_phrase(m.group(0)) else m.group(0), text)


def _free_placeholder(text: str) -> str:
    # A private-use character absent from the text stands in for each
    # protected phrase while the rest is rewritten. The query is at most
    # 2,048 characters, so one of these 6,400 code points is always free.
    for code in range(0xE000, 0xF900):
        mark = chr(code)
        if mark not in text:
            return mark
    raise AssertionError("unreachable: query longer than the private-use area")


def sanitize_fts5_query(query: str) -> str:
    """Rewrite ``query`` into an FTS5 expression that cannot raise a syntax error
    for the common cases (spec §4.2); returns ``""`` when nothing searchable is left.

    Balanced ``"phrases"`` are kept verbatim; unmatched quotes and the
    characters ``+ { } ( ) : ^`` become spaces; ``*`` survives only as a
    suffix; a leading or trailing ``AND``/``OR``/``NOT`` is dropped; terms
    such as ``chat-send`` or ``P2.2`` are quoted into phrases.
    """
    text = scrub_query(query[:MAX_FTS5_QUERY_CHARS])
    phrases: list[str] = []
    pieces: list[str] = []
    i = 0 if '"' in text else len(text)  # no quote: nothing to protect, skip the scan
    mark = _free_placeholder(text) if i == 0 else ""
    if i:
        pieces.append(text)
    while i < len(text):
        ch = text[i]
        if ch != '"':
            pieces.append(ch)
            i += 1
            continue
        end = text.find('"', i + 1)
        if end < 0:
            pieces.append(" ")
            i += 1
            continue
        phrases.append(text[i : end + 1])
        pieces.append(mark)
        i = end + 1
    # Each rewrite runs only when its characters occur: most queries are
    # plain words, and these passes were most of a zero-hit search's Python.
    work = "".join(pieces)
    if any(c in work for c in _SYNTAX_CHARS):
        work = work.translate(_SYNTAX_TO_SPACE)
    if "*" in work:
        work = _LEADING_STAR.sub(r"\1", _STAR_RUN.sub("*", work))
    work = _LEADING_OPERATOR.sub("", work.strip())
    work = _TRAILING_OPERATOR.sub("", work.strip())
    if "." in work or "-" in work or "_" in work:
        work = _quote_compound_terms(work)
    if phrases:
        restored = iter(phrases)
        work = "".join(next(restored) if ch == mark else ch for ch in work)
    return work.strip()


# --------------------------------------------------------------------- CJK


# The code points spec §4.3 counts as CJK (ideographs, kana, Hangul, CJK
# symbols), as inclusive ranges: the one list the checks here and the
# PostgreSQL CJK index expression are built from.
CJK_RANGES = ((0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0x20000, 0x2A6DF))
# The same as one character class: every search asks.
_CJK_CHAR = re.compile("[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in CJK_RANGES) + "]")


def is_cjk_codepoint(cp: int) -> bool:
    """True for the code points spec §4.3 counts as CJK (ideographs, kana, Hangul, CJK symbols)."""
    return any(low <= cp <= high for low, high in CJK_RANGES)


def _is_cjk_letter(cp: int) -> bool:
    # The characters the cjk_unicode61 tokenizer turns into bigrams; the
    # punctuation of the CJK symbols block (、。「」…) separates runs instead.
    if 0x3000 <= cp <= 0x30FF:
        return (
            0x3005 <= cp <= 0x3007
            or 0x3021 <= cp <= 0x3029
            or 0x3031 <= cp <= 0x3035
            or 0x3038 <= cp <= 0x303C
            or 0x3041 <= cp <= 0x3096
            or 0x309D <= cp <= 0x309F
            or 0x30A1 <= cp <= 0x30FA
            or 0x30FC <= cp <= 0x30FF
        )
    return is_cjk_codepoint(cp)


def contains_cjk(text: str) -> bool:
    """True when any character of ``text`` is CJK."""
    return not text.isascii() and _CJK_CHAR.search(text) is not None


def count_cjk(text: str) -> int:
    """Number of CJK characters in ``text``."""
    return 0 if text.isascii() else len(_CJK_CHAR.findall(text))


def has_lone_cjk_run(text: str) -> bool:
    """True when ``text`` has a CJK run of exactly one letter.

    The bigram index stores such a character only where it stands alone, so
    a query containing one cannot be answered from that index.
    """
    run = 0
    for ch in text:
        if _is_cjk_letter(ord(ch)):
            run += 1
            continue
        if run == 1:
            return True
        run = 0
    return run == 1


# ------------------------------------------------------------ token helpers


def plain_tokens(text: str) -> list[str]:
    """Whitespace tokens of ``text`` that are not bare ``AND``/``OR``/``NOT``."""
    return [tok for tok in text.split() if tok.upper() not in OPERATORS]


def quote_for_substring_index(raw: str) -> str:
    """The MATCH expression for the trigram/CJK indexes: every term a quoted phrase."""
    parts = []
    for tok in raw.split():
        parts.append(tok if tok.upper() in OPERATORS else '"' + tok.replace('"', '""') + '"')
    return " ".join(parts)


def trigram_eligible(query: str) -> bool:
    """True when the query has terms and every one is at least 3 characters (trigram-searchable)."""
    tokens = plain_tokens(query.strip('"').strip())
    return bool(tokens) and all(len(tok) >= 3 for tok in tokens)


def like_pattern(term: str) -> str:
    """``%term%`` with LIKE wildcards escaped (use with ``ESCAPE '\\'``)."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_TERM = re.compile(r'"[^"]*"|\S+')


def gap_terms(query: str) -> list[str]:
    """Terms of a sanitized query for the not-yet-indexed LIKE supplement (all must match)."""
    terms = []
    for raw in _TERM.findall(query):
        term = raw.strip('"').strip("*").strip()
        if term and term.upper() not in OPERATORS and term.upper() != "NEAR":
            terms.append(term)
    return terms


class BooleanGroup(NamedTuple):
    """One OR-branch of the stale-index LIKE search: all of ``positive``, none of ``negative``."""

    positive: tuple[str, ...]
    negative: tuple[str, ...]


def boolean_groups(query: str) -> list[BooleanGroup]:
    """Parse a sanitized query for the LIKE fallback used while the FTS index is stale (spec §4.6).

    ``OR`` starts a new group, ``AND``/``NEAR`` are implicit, ``NOT`` negates
    the next term; quotes and ``*`` are stripped. Groups without a positive
    term are dropped.
    """
    return _groups(query, lambda raw: raw.strip('"').replace("*", "").strip())


def _groups(query: str, term_of: Callable[[str], str]) -> list[BooleanGroup]:
    groups: list[BooleanGroup] = []
    positive: list[str] = []
    negative: list[str] = []
    negate = False
    for raw in _TERM.findall(query):
        word = raw.upper()
        if not raw.startswith('"'):
            if word == "OR":
                groups.append(BooleanGroup(tuple(positive), tuple(negative)))
                positive, negative, negate = [], [], False
                continue
            if word in ("AND", "NEAR"):
                continue
            if word == "NOT":
                negate = True
                continue
        term = term_of(raw)
        if not term:
            negate = False
            continue
        (negative if negate else positive).append(term)
        negate = False
    groups.append(BooleanGroup(tuple(positive), tuple(negative)))
    return [g for g in groups if g.positive]


# --------------------------------------------------------- literal matching

# A term word search finds as typed: word runs joined by single '.', '-' or
# '_' (the sanitizer makes those phrases), with an optional prefix '*'.
_WORD_TERM = re.compile(r"[^\W_]+(?:[._\-][^\W_]+)*\**")


def needs_literal(text: str) -> bool:
    """True when a term of ``text`` holds a character word search drops or splits on.

    ``status=502``, ``C#``, ``/srv/app``, ``a@b.org``, ``🔥`` or ``c++``:
    the tokenizer cannot find such a term as typed (or FTS5 rejects it), so
    only a literal substring match can. Plain words, phrases, ``prefix*``,
    ``snake_case`` and ``P2.2`` are word search's and give False.
    """
    if text.isascii() and text.replace(" ", "").isalnum():
        return False  # plain words, the common case: every search asks
    for tok in scrub_query(text[:MAX_FTS5_QUERY_CHARS]).replace('"', " ").split():
        if tok.upper() not in OPERATORS and tok.upper() != "NEAR" and _WORD_TERM.fullmatch(tok) is None:
            return True
    return False


def _literal_term(raw: str) -> str:
    if len(raw) >= 2 and raw.startswith('"') and raw.endswith('"'):
        return raw[1:-1]  # a phrase, verbatim
    term = raw.strip('"')
    # "dock*" means a prefix: as a substring its star goes; "***" stays what it is.
    return term.rstrip("*") or term


def literal_groups(text: str) -> list[BooleanGroup]:
    """The user's text (not the sanitized query) as boolean groups of literal substrings.

    Grouping as in :func:`boolean_groups` (``OR``, ``NOT``, implicit AND,
    ``"phrases"`` kept whole), but every character of a term is kept, so
    ``C#``, ``key=value`` or ``https://docs.docker.com`` are matched as typed.
    """
    return _groups(scrub_query(text[:MAX_FTS5_QUERY_CHARS]), _literal_term)


def literal_query(text: str) -> tuple[BooleanGroup, ...] | None:
    """The literal groups of ``text`` when word search cannot find it as typed, else None.

    CJK text has its own substring routes (spec §4.3) and never takes this one.
    """
    if not needs_literal(text) or contains_cjk(text):
        return None
    return tuple(literal_groups(text))


def searchable(
    text: str, limit: int, sources: Sequence[str] | None
) -> tuple[str, tuple[BooleanGroup, ...] | None] | None:
    """(sanitized FTS5 query, literal groups or None) for a search of ``text``, or None when the
    search can find nothing: no searchable text, ``limit`` 0, or an empty ``sources`` filter."""
    sanitized = sanitize_fts5_query(text)
    literal = literal_query(text)
    if not (sanitized or literal) or limit <= 0 or (sources is not None and not sources):
        return None
    return sanitized, literal


_ASCII_WORD = re.compile(r"[A-Za-z0-9]+")


def _bounded_words(term: str) -> list[str]:
    # Words of the term that stand between ASCII separators in it, so that any text
    # holding the term holds them as whole tokens (the last one as a prefix: the text
    # may go on). The first word may be the tail of a longer one: it is left out, as is
    # any word beside a non-ASCII character (the tokenizer may count that as a letter).
    words = []
    for found in _ASCII_WORD.finditer(term):
        start, end = found.span()
        if start == 0 or not term[start - 1].isascii():
            continue
        if end == len(term):
            words.append(f'"{found.group()}"*')
        elif term[end].isascii():
            words.append(f'"{found.group()}"')
    return words


def literal_prefilter(groups: Sequence[BooleanGroup]) -> str | None:
    """An FTS5 query (unicode61 words) that every row holding ``groups``' literal text matches.

    ``/srv/app`` gives ``"srv" AND "app"*``; ``status=502`` gives ``"502"*``. It lets
    the literal match read the word index's candidates instead of every row. None
    when some group has no such word (``C#``, ``🔥``): then only a scan can answer.
    """
    ors = []
    for group in groups:
        words = [word for term in group.positive for word in _bounded_words(term)]
        if not words:
            return None
        ors.append("(" + " AND ".join(dict.fromkeys(words)) + ")")
    return " OR ".join(ors) if ors else None
