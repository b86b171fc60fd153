"""Running a multi-statement SQL script inside an open transaction (the schema steps share it)."""

from __future__ import annotations

from typing import Any

from .driver import driver_module

__all__ = ["run_script"]


def run_script(conn: Any, script: str) -> None:
    """Execute each statement of ``script`` on ``conn``; returns None.

    Unlike ``executescript`` this never commits first, so it can run inside
    an open transaction.
    """
    complete = driver_module().complete_statement
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if complete(pending):
            if pending.strip():
                conn.execute(pending)
            pending = ""
    if pending.strip():
        conn.execute(pending)
