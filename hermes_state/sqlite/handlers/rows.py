"""Stored rows written as they are (``SessionDB.restore_rows`` / ``restore_messages``).

Multi-row ``INSERT ... ON CONFLICT (primary key) DO NOTHING RETURNING`` per
chunk: a key that exists is skipped and only a new row comes back, while
every other constraint (NOT NULL, the unique title, foreign keys) still
raises. Message rows fire the FTS triggers like any insert, and move their
session's counters in the same transaction (``rules.restore_counter_changes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...commands.rows import RestoreMessages, RestoreRows
from ...rules import restore_counter_changes, restore_gap, restore_plan, restore_result, restore_title_clash
from ...tables import TABLE_KEYS
from . import message_rows
from .common import require_session
from .registry import handles

MAX_ROWS_PER_STATEMENT = 500


def _chunks(rows: Sequence[tuple[Any, ...]], width: int) -> list[Sequence[tuple[Any, ...]]]:
    size = max(1, min(MAX_ROWS_PER_STATEMENT, message_rows._variable_limit() // max(1, width)))
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def _insert(conn: Any, table: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], tail: str = "") -> list[tuple[Any, ...]]:
    """Insert ``rows`` in chunks; returns what ``tail`` (a RETURNING clause) yields, in order."""
    names = ", ".join(f'"{name}"' for name in columns)
    one = "(" + ", ".join("?" * len(columns)) + ")"
    returned: list[tuple[Any, ...]] = []
    for chunk in _chunks(rows, len(columns)):
        sql = f'INSERT INTO "{table}" ({names}) VALUES {", ".join([one] * len(chunk))} {tail}'
        returned += [tuple(r) for r in conn.execute(sql, [value for row in chunk for value in row]).fetchall()]
    return returned


def _title_holders(conn: Any, titles: list[str]) -> dict[str, str]:
    holders: dict[str, str] = {}
    for start in range(0, len(titles), 500):
        chunk = titles[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        holders.update(conn.execute(f"SELECT title, id FROM sessions WHERE title IN ({marks})", chunk).fetchall())
    return holders


@handles(RestoreRows)
def restore_rows(conn: Any, cmd: RestoreRows) -> dict[str, Any]:
    key = TABLE_KEYS[cmd.table]
    plan = restore_plan(cmd.table, key, cmd.columns, cmd.rows)
    if plan.titles:
        clash = restore_title_clash(plan.titles, _title_holders(conn, sorted({title for _, title in plan.titles})))
        if clash is not None:
            raise ValueError(clash)
    names = ", ".join(f'"{name}"' for name in key)
    inserted = set(_insert(conn, cmd.table, cmd.columns, plan.rows, f"ON CONFLICT ({names}) DO NOTHING RETURNING {names}"))
    detached = []
    for session_id, parent in plan.links.items():
        if (session_id,) not in inserted:
            continue
        cur = conn.execute(
            "UPDATE sessions SET parent_session_id = ?1 WHERE id = ?2 AND EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
            (parent, session_id),
        )
        if cur.rowcount == 0:
            detached.append(session_id)
    return restore_result(key, cmd.columns, cmd.rows, inserted, detached)


def _count(conn: Any, cmd: RestoreMessages, skipped: int) -> None:
    """The session's counters after the restore (``rules.restore_counter_changes``)."""
    changes = restore_counter_changes(cmd.calls, cmd.counters, skipped)
    if changes:
        assignments = ", ".join(
            f'"{c.column}" = COALESCE("{c.column}", 0) + ?' if c.grow else f'"{c.column}" = ?' for c in changes
        )
        conn.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*(c.value for c in changes), cmd.session_id))


@handles(RestoreMessages)
def restore_messages(conn: Any, cmd: RestoreMessages) -> int:
    require_session(conn, cmd.session_id)
    have = int(conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (cmd.session_id,)).fetchone()[0])
    gap = restore_gap(cmd.session_id, have, cmd.start)
    if gap is not None:
        raise ValueError(gap)
    rows = [(cmd.session_id, *row) for row in cmd.rows[have - cmd.start :]]
    if rows:
        _insert(conn, "messages", ("session_id", *cmd.columns), rows)
    _count(conn, cmd, have - cmd.start)
    return len(rows)
