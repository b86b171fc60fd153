"""Call-site limits on numbers and JSON values.

Both backends store integers as signed 64-bit values, and JSON text must
stay readable by every consumer (``json``, SQLite's JSON functions,
PostgreSQL ``jsonb``). A value outside these limits is refused here, in the
caller's task, with a ``TypeError`` or ``ValueError`` that names the
argument and the limit, so it never reaches a transaction.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "FLOAT_MAX",
    "MAX_JSON_DEPTH",
    "int64_arg",
    "finite_arg",
    "saturating_add",
    "finite_sum",
    "check_json_value",
    "json_text",
    "parse_json_text",
    "NOT_JSON",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
FLOAT_MAX = sys.float_info.max
# Deep enough for any real message or tool call; shallow enough that every
# recursive JSON encoder and decoder on the way stays far from its own limit.
MAX_JSON_DEPTH = 100

_INT64_RANGE = "within the signed 64-bit range -2**63 .. 2**63 - 1"


def _short(value: int) -> str:
    return str(value) if value.bit_length() < 200 else f"an integer of {value.bit_length()} bits"


def int64_arg(value: Any, name: str) -> int:
    """Return ``value`` if it is an int (not bool) that fits in a signed 64-bit integer.

    Raises ``TypeError`` for other types and ``ValueError`` naming ``name``
    and the limit for an int out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{name} must be an integer {_INT64_RANGE}; got {_short(value)}")
    return value


def finite_arg(value: Any, name: str) -> float:
    """Return ``value`` as a finite float; ``TypeError`` for non-numbers, ``ValueError`` for NaN, ±inf or huge ints."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:  # only an int can be too large for a float
        got = _short(value) if isinstance(value, int) else repr(value)
        raise ValueError(f"{name} must be a finite number within the float range; got {got}") from None
    if not math.isfinite(result):
        raise ValueError(f"{name} must be a finite number (NaN and infinities are refused); got {value!r}")
    return result


def saturating_add(a: int, b: int) -> int:
    """``a + b`` clamped to the signed 64-bit range (how stored counters behave at their limit)."""
    return max(INT64_MIN, min(INT64_MAX, a + b))


def finite_sum(a: float, b: float) -> float:
    """``a + b`` clamped to the finite doubles (how stored costs behave at their limit)."""
    return max(-FLOAT_MAX, min(FLOAT_MAX, a + b))


class _Refused(Exception):
    """A JSON value the store will not keep; carries the path to the offending part."""

    def __init__(self, path: list[str], message: str, kind: type[Exception]) -> None:
        super().__init__(message)
        where = "".join(path)
        self.where = where if len(where) <= 80 else where[:80] + "..."
        self.kind = kind


def _walk(value: Any, depth: int, path: list[str]) -> None:
    if value is None or isinstance(value, (str, bool)):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise _Refused(path, f"integers must be {_INT64_RANGE}; got {_short(value)}", ValueError)
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused(path, f"numbers must be finite (NaN and infinities are refused); got {value!r}", ValueError)
        return
    if isinstance(value, (list, dict)):
        if depth >= MAX_JSON_DEPTH:
            raise _Refused(path, f"nesting is limited to {MAX_JSON_DEPTH} levels", ValueError)
        if isinstance(value, list):
            for index, item in enumerate(value):
                path.append(f"[{index}]")
                _walk(item, depth + 1, path)
                path.pop()
        else:
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _Refused(path, f"object keys must be strings, found {type(key).__name__} {key!r}", TypeError)
                path.append(f"[{key!r}]")
                _walk(item, depth + 1, path)
                path.pop()
        return
    hint = "; use a list" if isinstance(value, tuple) else ""
    raise _Refused(path, f"a value of type {type(value).__name__} cannot be stored (not a JSON value{hint})", TypeError)


def _plainly_valid(value: Any, depth: int) -> bool:
    """Fast path over exact builtin types; False means "look closer", not "invalid"."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return INT64_MIN <= value <= INT64_MAX
    if kind is float:
        return value - value == 0.0  # NaN and infinities give NaN
    if depth >= MAX_JSON_DEPTH:
        return False
    depth += 1
    if kind is list:
        for item in value:
            if not _plainly_valid(item, depth):
                return False
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _plainly_valid(item, depth):
                return False
        return True
    return False


def check_json_value(value: Any, name: str) -> None:
    """Refuse anything that would not come back from JSON exactly as given.

    Accepted: ``None``, ``bool``, ``str``, 64-bit ``int``, finite ``float``,
    and ``list``/``dict`` (``str`` keys) of those, nested at most
    :data:`MAX_JSON_DEPTH` levels. The error names ``name`` and the path to
    the offending part, e.g. ``tool_calls[0]['function']``.
    """
    if _plainly_valid(value, 0):
        return
    try:
        _walk(value, 0, [])  # the careful walk, which also names the path to the problem
    except _Refused as refused:
        raise refused.kind(f"{name}{refused.where}: {refused}") from None


NOT_JSON: Any = object()


def parse_json_text(text: str, name: str) -> Any:
    """Parse JSON text a caller passed in place of a value; :data:`NOT_JSON` if it is not JSON.

    Text nested too deep for the parser raises ``ValueError`` rather than
    counting as junk: it is JSON, just not JSON the store keeps.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{name}: nesting is limited to {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        return NOT_JSON


def json_text(value: Any, name: str) -> str:
    """``json.dumps(value)`` after :func:`check_json_value` (ASCII, the reference's spelling)."""
    check_json_value(value, name)
    return json.dumps(value)
