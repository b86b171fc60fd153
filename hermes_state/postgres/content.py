"""Message content in PostgreSQL: an explicit kind column instead of SQLite's NUL marker.

PostgreSQL TEXT cannot hold NUL, so the ``"\\x00json:"`` prefix SQLite uses
for structured content cannot be stored. The facade still encodes content
the SQLite way (``hermes_state.encoding``); ``encoding.split_content`` turns
that into ``(payload, kind)`` and this module maps it onto the columns
``(content_kind, content, content_bytes)``, and back through
``encoding.join_content``, so the shared decoder gives identical values on
both backends. Plain text that contains NUL is kept, exactly, as UTF-8 bytes.
"""

from __future__ import annotations

from typing import Any

from ..encoding import join_content, split_content

__all__ = ["TEXT", "JSON", "BYTES", "NUL_TEXT", "to_columns", "from_columns"]

# content_kind values (a SMALLINT column; 0 is also NULL content).
TEXT, JSON, BYTES, NUL_TEXT = 0, 1, 2, 3


def to_columns(value: Any) -> tuple[int, str | None, bytes | None]:
    """``(content_kind, content, content_bytes)`` for an encoded content value."""
    payload, kind = split_content(value)
    if payload is None:
        return TEXT, None, None
    if kind == "bytes":
        return BYTES, None, bytes(payload)  # type: ignore[arg-type]
    text = str(payload)
    if kind == "json":
        return JSON, text, None
    if "\x00" in text:
        return NUL_TEXT, None, text.encode("utf-8", "surrogatepass")
    return TEXT, text, None


def from_columns(kind: int, text: str | None, raw: bytes | None) -> Any:
    """The SQLite-encoded content value for stored columns (inverse of :func:`to_columns`)."""
    if kind == BYTES:
        return join_content(raw, "bytes")
    if kind == NUL_TEXT:
        return join_content(raw.decode("utf-8", "surrogatepass") if raw is not None else None, "text")
    return join_content(text, "json" if kind == JSON else "text")
