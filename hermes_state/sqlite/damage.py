"""A damaged database file: telling a broken index from a broken file.

SQLite says "database disk image is malformed" for a bad page wherever it
lies. A bad page inside a full-text index is survivable (the index is
rebuilt from ``messages``, or detached; see ``search.recovery``); a bad page
anywhere else means transcript rows are unreadable, and every further write
risks making it worse. :func:`damaged_tables` decides which case an error is
by checking only the tables that are not full-text indexes, and only after an
error said "malformed", so opening a file never scans it.
"""

from __future__ import annotations

from typing import Any

from .search.fts_schema import DB_ERRORS, TRASH_PREFIX

__all__ = ["damaged_tables", "is_malformed_error", "names_an_index"]

_MALFORMED_MARKERS = ("database disk image is malformed", "malformed database schema")
SQLITE_CORRUPT = 11  # primary result code; extended codes keep it in the low byte
# Full-text index tables and their shadow tables all start with this.
_INDEX_PREFIX = "messages_fts"


def is_malformed_error(exc: BaseException) -> bool:
    """True when ``exc`` is SQLite reporting damaged pages, a damaged schema or a damaged FTS index.

    Besides the spec's wording this knows the forms older SQLite (3.40)
    uses for a damaged FTS5 structure record (``vtable constructor failed:
    messages_fts``) and the primary result code SQLITE_CORRUPT where the
    exception carries it (Python 3.11+).
    """
    if not isinstance(exc, DB_ERRORS):
        return False
    text = str(exc).lower()
    code = getattr(exc, "sqlite_errorcode", None)
    if any(marker in text for marker in _MALFORMED_MARKERS) or ("fts5" in text and "corrupt" in text):
        return True
    if code is None:  # Python 3.10: the message alone decides
        return "vtable constructor failed: messages_fts" in text
    return code & 0xFF == SQLITE_CORRUPT


def names_an_index(exc: BaseException) -> bool:
    """True when the error text itself places the damage in a full-text index."""
    text = str(exc).lower()
    return "fts5" in text or _INDEX_PREFIX in text


def damaged_tables(conn: Any) -> list[str]:
    """Names of the non-index tables whose pages fail ``PRAGMA quick_check``; [] when they are all sound.

    Reads every page of those tables and their indexes (not of the FTS
    indexes), so it is only called once an error said "malformed". A schema
    that cannot be read at all is reported as ``["sqlite_master"]``.
    """
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()]
    except DB_ERRORS:
        return ["sqlite_master"]
    damaged = []
    for name in names:
        if name.startswith((_INDEX_PREFIX, TRASH_PREFIX)):
            continue
        quoted = name.replace("'", "''")
        try:
            rows = conn.execute(f"PRAGMA quick_check('{quoted}')").fetchall()
        except DB_ERRORS:
            damaged.append(name)
            continue
        if [r[0] for r in rows] != ["ok"]:
            damaged.append(name)
    return damaged
