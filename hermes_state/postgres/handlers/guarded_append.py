"""Appends in one round trip: the admission guard, the insert and the counters in one statement.

The writer has already locked the sessions' rows (and the turn-lease rows
of fenced commands) in an earlier statement, so this statement's snapshot
sees every end and lease committed before those locks were granted (in the
lock statement itself it would not: a snapshot is taken when a statement
starts, before it waits for a lock).

The statement reads each session's guard state (exists, closed by
compression, and for fenced commands its conversation's lease holder and
token), inserts the rows of the commands SQL admits (session exists, not
closed by compression, fence holds), in input order, renews admitted
fences' leases that expired without a takeover (database clock), bumps the
counters by what it inserted, and returns the guard state with the new ids.
Python then judges each command with ``rules.append_refusal`` and checks
that SQL admitted exactly the same commands.

A column whose value is the same in every row of the run is sent once as a
scalar instead of an array (most columns are NULL in most runs), so the
statement's text depends on which columns vary; asyncpg prepares each text
once per connection. The arrays (and the row count) reach ``unnest`` through
``(SELECT $n)``: PostgreSQL then cannot see how many rows a run holds, so a
custom plan never looks cheaper than the generic one, and after its first
executions the statement stops being planned again (a one-row run planned
every time cost about 1 ms of server CPU more than the whole insert).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ...commands.messages import AppendMessages
from ...rules import append_refusal, fence_holds
from ..clock import DB_NOW
from .common import MESSAGE_COLUMNS, message_values

__all__ = ["GuardedAppend", "guarded_append"]

# The message columns, then per-row values that are not columns: the command's
# fence (holder, token, TTL for a renewal) and its tool-call count (for the counters).
_COLUMNS = (
    *MESSAGE_COLUMNS, ("fence_holder", "text"), ("fence_token", "int8"), ("fence_ttl", "float8"), ("calls", "int8"),
)
_NAMES = ", ".join(f'"{name}"' for name, _ in MESSAGE_COLUMNS)
_ROW_NAMES = ", ".join(f'r."{name}"' for name, _ in MESSAGE_COLUMNS)
_N = len(_COLUMNS)

_STATE = """st AS (
    SELECT k.id, s.id IS NOT NULL AS present, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END AS closed,
        NULL::text AS key, NULL::text AS holder, NULL::int8 AS token
    FROM unnest((SELECT $1::text[])) AS k(id) LEFT JOIN sessions AS s ON s.id = k.id
)"""
# With fenced commands: each session's conversation key and that conversation's lease.
_FENCED_STATE = """st AS (
    SELECT k.id, s.id IS NOT NULL AS present, CASE WHEN s.ended_at IS NOT NULL THEN s.end_reason END AS closed,
        COALESCE(s.conversation_id, k.id) AS key, l.holder, l.token
    FROM unnest((SELECT $1::text[])) AS k(id) LEFT JOIN sessions AS s ON s.id = k.id
    LEFT JOIN session_turn_leases AS l ON l.conversation_id = COALESCE(s.conversation_id, k.id)
)"""
_RENEW = f""", renew AS (
    UPDATE session_turn_leases AS l SET expires_at = {DB_NOW} + f.ttl
    FROM (SELECT st.key, max(ok.fence_ttl) AS ttl FROM ok JOIN st ON st.id = ok.session_id
          WHERE ok.fence_holder IS NOT NULL GROUP BY st.key) AS f
    WHERE l.conversation_id = f.key AND l.expires_at <= {DB_NOW}
)"""
# Parameter $1 (session ids) is the guard's; the row values start at $2.
_FIRST = 2


@lru_cache(maxsize=128)  # a handful of shapes in practice; bounded all the same
def _sql(constant: tuple[bool, ...], fenced: bool) -> str:
    """The statement for a run whose columns ``constant[i]`` are sent as scalars."""
    arrays, names, exprs = [], [], []
    for i, ((name, kind), fixed) in enumerate(zip(_COLUMNS, constant)):
        param = f"${_FIRST + i}::{kind}"
        if fixed:
            exprs.append(f'{param} AS "{name}"')
        else:
            arrays.append(f"(SELECT {param}[])")
            names.append(f'"{name}"')
            exprs.append(f'u."{name}"')
    if arrays:
        source = f"unnest({', '.join(arrays)}) WITH ORDINALITY AS u({', '.join(names)}, ord)"
    else:  # every column constant: the row count comes as one more parameter
        source = f"generate_series(1, (SELECT ${_FIRST + _N}::int8)) AS u(ord)"
    return f"""WITH {_FENCED_STATE if fenced else _STATE}, r AS (
    SELECT u.ord, {', '.join(exprs)} FROM {source}
), ok AS (
    SELECT r.* FROM r JOIN st ON st.id = r.session_id
    WHERE st.present AND st.closed IS DISTINCT FROM 'compression'
      AND (r.fence_holder IS NULL OR (st.holder = r.fence_holder AND (r.fence_token IS NULL OR st.token = r.fence_token)))
){_RENEW if fenced else ''}, ins AS (
    INSERT INTO messages ({_NAMES}) SELECT {_ROW_NAMES} FROM ok AS r ORDER BY r.ord RETURNING id
), bump AS (
    UPDATE sessions AS s SET message_count = COALESCE(s.message_count, 0) + c.added,
        tool_call_count = COALESCE(s.tool_call_count, 0) + c.calls
    FROM (SELECT session_id, count(*) AS added, sum(calls)::int8 AS calls FROM ok GROUP BY session_id) AS c
    WHERE s.id = c.session_id
)
SELECT id, present, closed, holder, token, NULL::int8 AS new_id FROM st
UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, id FROM ins"""


def _is_constant(values: list[Any]) -> bool:
    """Every value the same, of the same type (floats only when the same object: -0.0 == 0.0)."""
    first = values[0]
    if isinstance(first, float):
        return all(v is first for v in values)
    kind = type(first)
    return all(v is first or (type(v) is kind and v == first) for v in values)


class GuardedAppend(NamedTuple):
    """What :func:`guarded_append` did, per command in input order."""

    refusals: list[BaseException | None]  # the caller's exception, None when admitted
    ids: list[list[int]]  # new ids per command (empty for refused commands)


async def guarded_append(conn: Any, commands: Sequence[AppendMessages]) -> GuardedAppend:
    """Guard, insert and count ``commands``' rows in one statement (see the module docstring)."""
    rows: list[tuple[Any, ...]] = []
    for cmd in commands:
        fence = cmd.fence
        tail = (None, None, None) if fence is None else (fence.holder, fence.token, fence.ttl_seconds)
        rows.extend((*message_values(cmd.session_id, row), *tail, row.tool_call_count) for row in cmd.rows)
    session_ids = sorted({cmd.session_id for cmd in commands})
    columns = [list(col) for col in zip(*rows)] if rows else [[None] for _ in range(_N)]
    constant = tuple(_is_constant(col) for col in columns)
    args: list[Any] = [session_ids]
    args.extend(col[0] if fixed else col for col, fixed in zip(columns, constant))
    if all(constant):
        args.append(len(rows))
    fenced = any(cmd.fence is not None for cmd in commands)
    records = await conn.fetch(_sql(constant, fenced), *args)
    state: dict[str, tuple[Any, ...]] = {}
    new_ids: list[int] = []
    for r in records:
        if r[5] is not None:
            new_ids.append(r[5])
        else:
            state[r[0]] = (r[1], r[2], r[3], r[4])
    new_ids.sort()
    refusals: list[BaseException | None] = []
    ids: list[list[int]] = []
    taken = 0
    for cmd in commands:
        present, closed, lease_holder, lease_token = state[cmd.session_id]
        refusal = append_refusal(cmd.session_id, present, closed, fence_holds(cmd.fence, lease_holder, lease_token))
        refusals.append(refusal)
        if refusal is None:
            ids.append(new_ids[taken:taken + len(cmd.rows)])
            taken += len(cmd.rows)
        else:
            ids.append([])
    if taken != len(new_ids):  # SQL and the rules disagree: never expected; fail loudly
        raise RuntimeError(f"append guard mismatch: inserted {len(new_ids)} rows, the rules admitted {taken}")
    return GuardedAppend(refusals, ids)
