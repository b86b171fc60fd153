"""Call-site refusal of NUL characters in text that PostgreSQL cannot store.

PostgreSQL ``text`` cannot hold U+0000. Message *content* keeps NUL exactly
(it goes to ``content_bytes``, see ``content``); every other string a write
carries (ids, roles, names, models, paths, reasoning text, titles...) is
checked here, before the command is queued, so the caller gets a
``ValueError`` naming the field instead of a failed write after queueing.
SQLite stores such text as given: this is a listed backend difference.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..commands.rows import RestoreMessages, RestoreRows

__all__ = ["nul_refusal"]

# Fields whose NUL characters are stored losslessly (message content and its comparison value).
_LOSSLESS = frozenset({"content"})
_ENCODER = msgspec.json.Encoder()


def _walk(value: Any, path: str) -> str | None:
    """The path of the first string under ``value`` that holds NUL, else None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, (tuple, list)):
        if path.endswith("columns") and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            # ImportedSession.columns: (column, value) pairs; name the column.
            return next((f"{path}.{name}" for name, v in value if isinstance(v, str) and "\x00" in v), None)
        # Message rows are named the way the facade names a message's arguments.
        prefix = "messages" if path == "rows" else path
        for index, item in enumerate(value):
            found = _walk(item, f"{prefix}[{index}]")
            if found is not None:
                return found
        return None
    if isinstance(value, msgspec.Struct):
        for field in value.__struct_fields__:
            if field in _LOSSLESS:
                continue
            inner = f"{path}: {field}" if path.endswith("]") else f"{path}.{field}" if path else field
            found = _walk(getattr(value, field), inner)
            if found is not None:
                return found
    return None


def _stored_rows_refusal(command: RestoreRows | RestoreMessages) -> ValueError | None:
    """The first text value of a restore outside message content that holds NUL, named by table, row and column."""
    table = command.table if isinstance(command, RestoreRows) else "messages"
    for index, row in enumerate(command.rows):
        for name, value in zip(command.columns, row):
            if isinstance(value, str) and "\x00" in value and not (table == "messages" and name in _LOSSLESS):
                return ValueError(
                    f"rows[{index}].{name} must not contain NUL characters: PostgreSQL text columns cannot store them "
                    f"(table {table})"
                )
    return None


def nul_refusal(command: msgspec.Struct) -> ValueError | None:
    """A ``ValueError`` naming the first non-content text field of ``command`` that holds NUL, else None."""
    if isinstance(command, (RestoreRows, RestoreMessages)):
        return _stored_rows_refusal(command)
    # Fast path: no escaped NUL anywhere in the encoded command (the common case).
    try:
        if b"\\u0000" not in _ENCODER.encode(command):
            return None
    except (TypeError, ValueError):  # not JSON-encodable: check field by field
        pass
    where = _walk(command, "")
    if where is None:
        return None
    return ValueError(f"{where} must not contain NUL characters: PostgreSQL text columns cannot store them")
