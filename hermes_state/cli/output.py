"""Printing for people and for scripts: JSON, times, sizes, and a progress bar on terminals only."""

from __future__ import annotations

import base64
import json
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["print_json", "json_default", "encode_json", "decode_json", "when", "size", "progress"]


def json_default(value: Any) -> Any:
    """JSON for what ``json`` cannot encode: bytes as base64 text (as the export does), the rest as text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return str(value)


def encode_json(value: Any) -> bytes:
    """``value`` as compact JSON bytes (msgspec, imported on first use: start-up stays light)."""
    import msgspec

    return msgspec.json.encode(value)


def decode_json(data: bytes) -> Any:
    """The value of JSON ``data``; raises ``msgspec.DecodeError`` when it is not JSON."""
    import msgspec

    return msgspec.json.decode(data)


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    print(json.dumps(value, indent=2, ensure_ascii=False, default=json_default))


def when(stamp: Any) -> str:
    """Epoch seconds as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for none."""
    if stamp is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(stamp)))
    except (TypeError, ValueError, OverflowError, OSError):
        return str(stamp)


def size(n: int | None) -> str:
    """Bytes in a short human unit."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def progress(total: int | None, desc: str, unit: str = "session") -> tqdm:
    """A progress bar on stderr when it is a terminal; a silent counter otherwise."""
    from tqdm import tqdm  # here: only commands that count something load it

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)
