"""Argument types shared by the commands: each returns the parsed value or raises ``ArgumentTypeError`` (exit 2)."""

from __future__ import annotations

import argparse
import re
import time
from datetime import datetime

__all__ = ["non_negative", "days", "parse_since", "port_number"]

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w`` ago, or an ISO date/time (local time); returns epoch seconds."""
    match = _RELATIVE.match(text)
    if match:
        return time.time() - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid time {text!r}: use a duration like 7d, 12h, 30m or a date like 2026-01-31"
        ) from None


def non_negative(text: str) -> int:
    """An integer 0 or more (limits, offsets, batch sizes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {value}")
    return value


def days(text: str) -> float:
    """A finite number of days, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of days, 0 or more: {text}")
    return value


def port_number(text: str) -> int:
    """A TCP port 0-65535 (0: the system picks a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}: give a number from 0 to 65535") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"invalid port {value}: give a number from 0 to 65535")
    return value
