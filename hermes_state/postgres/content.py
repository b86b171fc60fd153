"""Message content in PostgreSQL: an explicit kind column instead of SQLite's NUL marker.

PostgreSQL TEXT cannot hold NUL, so the ``"\\x00json:"`` prefix SQLite uses
for structured content cannot be stored. The facade still encodes content
the SQLite way (``hermes_state.encoding``); this module maps that value to
``(content_kind, content, content_bytes)`` on the way in and back to the
SQLite-encoded value on the way out, so the shared decoder gives identical
results on both backends.
"""

from __future__ import annotations

from typing import Any

from ..encoding import JSON_CONTENT_PREFIX

__all__ = ["BYTES", "FLOAT", "INT", "JSON", "NUL_TEXT", "TEXT", "from_columns", "to_columns"]

TEXT, JSON, BYTES, INT, FLOAT, NUL_TEXT = 0, 1, 2, 3, 4, 5


def to_columns(value: Any) -> tuple[int, str | None, bytes | None]:
    """``(content_kind, content, content_bytes)`` for an encoded content value."""
    if value is None:
        return TEXT, None, None
    if isinstance(value, bool):  # never produced by the encoder; stored as its int
        return INT, str(int(value)), None
    if isinstance(value, str):
        if value.startswith(JSON_CONTENT_PREFIX):
            return JSON, value[len(JSON_CONTENT_PREFIX):], None
        if "\x00" in value:
            # Kept exactly, as UTF-8 bytes; search sees no text for it.
            return NUL_TEXT, None, value.encode("utf-8", "surrogatepass")
        return TEXT, value, None
    if isinstance(value, int):
        return INT, str(value), None
    if isinstance(value, float):
        return FLOAT, repr(value), None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BYTES, None, bytes(value)
    raise TypeError(f"message content of type {type(value).__name__} cannot be stored")


def from_columns(kind: int, text: str | None, raw: bytes | None) -> Any:
    """The SQLite-encoded content value for stored columns (inverse of :func:`to_columns`)."""
    if kind == JSON:
        return JSON_CONTENT_PREFIX + (text or "")
    if kind == BYTES:
        return raw
    if kind == INT:
        return int(text) if text is not None else None
    if kind == FLOAT:
        return float(text) if text is not None else None
    if kind == NUL_TEXT:
        return raw.decode("utf-8", "surrogatepass") if raw is not None else None
    return text
