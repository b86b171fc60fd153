"""The export file format (version 2): JSON Lines, one stored row per line, between a header and an end line.

``docs/export-format.md`` describes it for readers of the files; this module
is the one place that writes and reads its lines. Version 1 is what earlier
releases wrote: one session object (``export_session`` shape) per line, no
header; ``import`` still reads it.
"""

from __future__ import annotations

import base64
import math
import time
from typing import Any

import msgspec

from .errors import CliError

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "decode_row",
    "encode_row",
    "end_line",
    "header_line",
    "read_header",
]

FORMAT = "hermes-state-export"
FORMAT_VERSION = 2

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _tagged(value: Any) -> Any:
    """JSON for a stored value: bytes and non-finite floats become one-key objects (no stored value is an object)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def _untagged(value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        if isinstance(value, list):
            raise ValueError(f"{where}: a stored value is never a list")
        return value
    if len(value) == 1 and isinstance(value.get("$bytes"), str):
        try:
            return base64.b64decode(value["$bytes"], validate=True)
        except ValueError:
            raise ValueError(f"{where}: $bytes is not base64") from None
    if len(value) == 1 and value.get("$float") in ("inf", "-inf"):
        return float(value["$float"])
    raise ValueError(f"{where}: an object is not a stored value (only {{\"$bytes\": ...}} or {{\"$float\": ...}})")


def header_line(schema_version: int | None, backend: str, scope: str) -> bytes:
    """The first line: what wrote the file and from which store."""
    return _encode({"format": FORMAT, "format_version": FORMAT_VERSION, "schema_version": schema_version,
                    "backend": backend, "scope": scope, "exported_at": time.time()}) + b"\n"


def encode_row(table: str, row: dict[str, Any]) -> bytes:
    """One row line: ``{"table": ..., "row": {column: value}}``."""
    return _encode({"table": table, "row": {name: _tagged(value) for name, value in row.items()}}) + b"\n"


def end_line(counts: dict[str, int]) -> bytes:
    """The last line: rows per table, so an import can tell a complete file from a cut one."""
    return _encode({"end": {"rows": counts}}) + b"\n"


def read_header(line: bytes) -> dict[str, Any] | None:
    """The header of a version-2 (or later) file, or None for a version-1 file (no header).

    Raises :class:`CliError` for a format version this release does not know.
    """
    try:
        value = _decode(line)
    except msgspec.DecodeError:
        return None
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        return None
    version = value.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 2:
        raise CliError(f"line 1: format_version must be an integer of 2 or more, got {version!r}")
    if version > FORMAT_VERSION:
        raise CliError(
            f"this export is format version {version} (schema version {value.get('schema_version')}); this "
            f"hermes-state reads format versions 1 to {FORMAT_VERSION}: upgrade hermes-state to import it"
        )
    return value


def decode_row(line: bytes, label: str) -> tuple[str, dict[str, Any]] | dict[str, Any]:
    """``(table, row)`` of a row line, or the ``end`` object of the end line; ``ValueError`` naming ``label``."""
    try:
        value = _decode(line)
    except msgspec.DecodeError as exc:
        raise ValueError(f"{label}: not valid JSON ({exc})") from None
    if isinstance(value, dict) and set(value) == {"end"} and isinstance(value["end"], dict):
        return value["end"]
    if not isinstance(value, dict) or set(value) != {"table", "row"}:
        raise ValueError(f"{label}: expected {{\"table\": ..., \"row\": {{...}}}}")
    table, row = value["table"], value["row"]
    if not isinstance(table, str) or not isinstance(row, dict):
        raise ValueError(f"{label}: table must be a string and row an object")
    return table, {name: _untagged(cell, f"{label}: {table}.{name}") for name, cell in row.items()}
