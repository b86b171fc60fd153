"""Stored rows written as they are (the rules of ``sqlite.handlers.rows``).

One ``INSERT ... SELECT FROM unnest(...) ON CONFLICT (primary key) DO
NOTHING RETURNING`` per call, each array cast to its column's type as the
catalog reports it (a column the store gained later travels too). Message
content goes to ``content``/``content_kind``/``content_bytes`` the way every
other insert stores it (:mod:`hermes_state.postgres.content`); message rows
keep their order through ``WITH ORDINALITY`` and move their session's
counters in the same transaction (``rules.restore_counter_changes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...commands.rows import RestoreMessages, RestoreRows
from ...errors import SessionNotFoundError
from ...rules import restore_counter_changes, restore_gap, restore_plan, restore_result, restore_title_clash
from ...tables import TABLE_KEYS
from ..content import to_columns
from ..queries.rows import column_types
from .registry import handles


def _unnest(types: Sequence[str]) -> str:
    """``unnest($1::t1[], ...) WITH ORDINALITY AS u(c0, ..., ord)``."""
    arrays = ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(types, 1))
    names = ", ".join(f"c{i}" for i in range(len(types)))
    return f"unnest({arrays}) WITH ORDINALITY AS u({names}, ord)"


def _arrays(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows)] if rows else [[] for _ in range(width)]


async def _insert(
    conn: Any, table: str, columns: Sequence[str], types: Sequence[str], rows: Sequence[tuple[Any, ...]], tail: str = ""
) -> list[Any]:
    names = ", ".join(f'"{name}"' for name in columns)
    values = ", ".join(f"u.c{i}" for i in range(len(columns)))
    sql = f'INSERT INTO "{table}" ({names}) SELECT {values} FROM {_unnest(types)} ORDER BY u.ord {tail}'
    return list(await conn.fetch(sql, *_arrays(rows, len(columns))))


@handles(RestoreRows)
async def restore_rows(conn: Any, cmd: RestoreRows) -> dict[str, Any]:
    key = TABLE_KEYS[cmd.table]
    plan = restore_plan(cmd.table, key, cmd.columns, cmd.rows)
    if plan.titles:
        rows = await conn.fetch(
            "SELECT title, id FROM sessions WHERE title = ANY($1::text[])", sorted({t for _, t in plan.titles})
        )
        clash = restore_title_clash(plan.titles, {r[0]: r[1] for r in rows})
        if clash is not None:
            raise ValueError(clash)
    types = await column_types(conn, cmd.table)
    names = ", ".join(f'"{name}"' for name in key)
    returned = await _insert(
        conn, cmd.table, cmd.columns, [types[name] for name in cmd.columns], plan.rows,
        f"ON CONFLICT ({names}) DO NOTHING RETURNING {names}",
    )
    inserted = {tuple(r) for r in returned}
    detached = []
    if plan.links:
        fresh = [sid for sid in plan.links if (sid,) in inserted]
        linked = await conn.fetch(
            "UPDATE sessions AS s SET parent_session_id = l.parent FROM unnest($1::text[], $2::text[]) AS l(id, parent) "
            "WHERE s.id = l.id AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = l.parent) RETURNING s.id",
            fresh, [plan.links[sid] for sid in fresh],
        )
        done = {r[0] for r in linked}
        detached = [sid for sid in fresh if sid not in done]
    return restore_result(key, cmd.columns, cmd.rows, inserted, detached)


async def _insert_messages(conn: Any, cmd: RestoreMessages, rows: Sequence[tuple[Any, ...]]) -> None:
    types = await column_types(conn, "messages")
    columns = ["session_id", *cmd.columns]
    kinds = ["text", *(types[name] for name in cmd.columns)]
    if "content" in cmd.columns:
        at = cmd.columns.index("content")
        columns += ["content_kind", "content_bytes"]
        kinds += ["smallint", "bytea"]
        split = [to_columns(row[at]) for row in rows]
        values = [(cmd.session_id, *row[:at], text, *row[at + 1 :], kind, raw) for row, (kind, text, raw) in zip(rows, split)]
    else:
        values = [(cmd.session_id, *row) for row in rows]
    await _insert(conn, "messages", columns, kinds, values)


async def _count(conn: Any, cmd: RestoreMessages, skipped: int) -> None:
    """The session's counters after the restore (``rules.restore_counter_changes``)."""
    changes = restore_counter_changes(cmd.calls, cmd.counters, skipped)
    if changes:
        assignments = ", ".join(
            f'"{c.column}" = COALESCE("{c.column}", 0) + ${i}' if c.grow else f'"{c.column}" = ${i}'
            for i, c in enumerate(changes, 2)
        )
        await conn.execute(f"UPDATE sessions SET {assignments} WHERE id = $1", cmd.session_id, *(c.value for c in changes))


@handles(RestoreMessages)
async def restore_messages(conn: Any, cmd: RestoreMessages) -> int:
    # The session row locked first, as appends and the recount lock it: the count, the rows and the
    # counters stay in step whatever another process writes meanwhile.
    if await conn.fetchval("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE", cmd.session_id) is None:
        raise SessionNotFoundError(cmd.session_id)
    have = int(await conn.fetchval("SELECT COUNT(*) FROM messages WHERE session_id = $1", cmd.session_id))
    gap = restore_gap(cmd.session_id, have, cmd.start)
    if gap is not None:
        raise ValueError(gap)
    rows = cmd.rows[have - cmd.start :]
    if rows:
        await _insert_messages(conn, cmd, rows)
    await _count(conn, cmd, have - cmd.start)
    return len(rows)
