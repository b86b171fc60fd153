"""Stored rows as they are, for lossless copies, backups and comparisons between stores.

The session-shaped export (``export_all`` and friends) returns what a host
needs to show a conversation: active messages, decoded. These methods carry
everything a store holds for its users instead, table by table
(:mod:`hermes_state.tables`): every column the store reports, archived,
compacted and rewound messages with their flags and order, the usage ledger,
prompts, ``state_meta`` (without the store's own bookkeeping), gateway
routing and async delegations. Values stay in their stored form (message
content is text or bytes, structured content in the JSON-marker form, times
are floats), so what one store's ``dump_*`` returns, another's
``restore_*`` writes back unchanged, SQLite or PostgreSQL alike; message ids
are the target's own, their order is the source's.

Reads page by primary key (each store in its own key order), so memory
stays bounded by a page. Writes never change a row that exists: a key that
is present is skipped (and reported), so repeating a restore after an
interruption adds nothing twice. The one exception is a session's counters,
which ``restore_messages`` keeps in step with the rows it adds and sets to
the source's values once the session is whole: a copy restores session rows
with zero counters, and whenever it stops, every counter agrees with the
rows its session holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..commands.rows import RestoreMessages, RestoreRows
from ..encoding import stored_tool_call_count
from ..facade import StoreBase, require_id
from ..limits import int64_arg
from ..tables import COUNTER_COLUMNS, INTEGER, KEYED_TABLES, TABLE_KEYS, is_store_meta, stored_value

__all__ = ["RESTORE_MAX_ROWS", "RowMethods"]

# The most rows one restore call (one transaction) may carry.
RESTORE_MAX_ROWS = 10_000
_MAX_PAGE = 10_000


def _table_arg(table: Any) -> str:
    if not isinstance(table, str):
        raise TypeError(f"table must be a str, not {type(table).__name__}")
    if table not in KEYED_TABLES:
        raise ValueError(f"table must be one of {', '.join(KEYED_TABLES)} (messages: dump_messages), not {table!r}")
    return table


def _limit_arg(limit: Any) -> int:
    value = int64_arg(limit, "limit")
    if not 1 <= value <= _MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {_MAX_PAGE}, got {value}")
    return value


def _key_arg(table: str, key: Any, name: str) -> tuple[str, ...]:
    """A primary key of ``table``: one str per key column (a bare str for a one-column key)."""
    width = len(TABLE_KEYS[table])
    if isinstance(key, str) and width == 1:
        key = (key,)
    if isinstance(key, (str, bytes)) or not isinstance(key, Sequence) or len(key) != width:
        raise TypeError(f"{name} must be a sequence of {width} str (the key of {table}: {', '.join(TABLE_KEYS[table])})")
    for part in key:
        if not isinstance(part, str):
            raise TypeError(f"{name} must hold str values, not {type(part).__name__}")
    return tuple(key)


def _rows_arg(rows: Any) -> list[Mapping[str, Any]]:
    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Sequence):
        raise TypeError(f"rows must be a list of dicts, not {type(rows).__name__}")
    if len(rows) > RESTORE_MAX_ROWS:
        raise ValueError(f"rows must hold at most {RESTORE_MAX_ROWS} rows per call, got {len(rows)}")
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(f"rows[{index}] must be a dict, not {type(row).__name__}")
    return list(rows)


def _counters_arg(counters: Any) -> tuple[tuple[str, int | None], ...]:
    """The session counters ``counters`` names, as (column, value) pairs; each an int or None."""
    if not isinstance(counters, Mapping):
        raise TypeError(f"counters must be a mapping (a session row will do), not {type(counters).__name__}")
    pairs = tuple((name, stored_value(INTEGER, counters[name], f"counters[{name!r}]")) for name in COUNTER_COLUMNS
                  if name in counters)
    if not pairs:
        raise ValueError(f"counters must hold {' and/or '.join(COUNTER_COLUMNS)}")
    return pairs


def _row_size(values: Sequence[Any]) -> int:
    return 64 + sum(len(v) for v in values if isinstance(v, (str, bytes)))


class RowMethods(StoreBase):
    """Row-level reads and writes of the tables that hold user data (see :mod:`hermes_state.tables`)."""

    _column_kinds: dict[str, dict[str, str]]

    async def table_columns(self, table: str) -> dict[str, str]:
        """Return ``{column: kind}`` for every column of ``table`` this store reports, in table order.

        ``table`` is a keyed table or ``"messages"``. Kinds are ``"integer"``,
        ``"real"``, ``"text"``, ``"blob"``, and ``"content"`` for
        ``messages.content`` (text or bytes). A store's columns are fixed
        once it is open, so the answer is cached.
        """
        if table != "messages":
            table = _table_arg(table)
        cache = self.__dict__.setdefault("_column_kinds", {})
        if table not in cache:
            cache[table] = dict(await self._query("table_columns", table))
        return dict(cache[table])

    async def dump_rows(
        self,
        table: str,
        *,
        after: Sequence[str] | str | None = None,
        limit: int = 1000,
        session_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return up to ``limit`` rows of ``table``, every column, in primary-key order after the key ``after``.

        Page through a table by passing the last row's key as ``after``
        (its values in :data:`hermes_state.tables.TABLE_KEYS` order; a str
        for a one-column key). ``session_id`` keeps the rows of one session
        (``sessions`` and ``session_model_usage``). ``state_meta`` leaves out
        the store's own bookkeeping keys. Messages: :meth:`dump_messages`.
        """
        table = _table_arg(table)
        cursor = None if after is None else _key_arg(table, after, "after")
        if session_id is not None:
            session_id = require_id(session_id)
            if table not in ("sessions", "session_model_usage"):
                raise ValueError(f"session_id filters sessions and session_model_usage, not {table}")
        return list(await self._query("dump_rows", table, cursor, _limit_arg(limit), session_id))

    async def find_rows(self, table: str, keys: Sequence[Sequence[str] | str]) -> list[dict[str, Any]]:
        """Return the rows of ``table`` whose primary key is in ``keys`` (every column), in key order.

        Keys with no row are left out. Like :meth:`dump_rows`, ``state_meta``
        never returns a bookkeeping key. At most 10,000 keys per call.
        """
        table = _table_arg(table)
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence):
            raise TypeError(f"keys must be a list of keys, not {type(keys).__name__}")
        if len(keys) > _MAX_PAGE:
            raise ValueError(f"keys must hold at most {_MAX_PAGE} keys per call, got {len(keys)}")
        wanted = list(dict.fromkeys(_key_arg(table, key, f"keys[{i}]") for i, key in enumerate(keys)))
        if not wanted:
            return []
        return list(await self._query("find_rows", table, wanted))

    async def dump_messages(
        self, session_id: str, *, after_id: int | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Return up to ``limit`` of the session's message rows with ``id > after_id``, in id order.

        Every row (active, archived, compacted and rewound alike) with every
        column, in stored form: ``content`` as stored (text, bytes, or the
        ``"\\x00json:"`` form of structured content), ``tool_calls`` and the
        other JSON columns as text. ``id`` is this store's row id (for
        paging); another store numbers the rows itself.
        """
        session_id = require_id(session_id)
        after = 0 if after_id is None else int64_arg(after_id, "after_id")
        return list(await self._query("dump_messages", session_id, after, _limit_arg(limit)))

    async def _prepared_rows(
        self, table: str, rows: list[Mapping[str, Any]], skip: frozenset[str] = frozenset()
    ) -> tuple[tuple[str, ...], tuple[tuple[Any, ...], ...]]:
        """(columns, value tuples) of ``rows``, each value checked against the store's column kinds."""
        kinds = await self.table_columns(table)
        columns = tuple(name for name in rows[0] if name not in skip)
        names = set(columns)
        for index, row in enumerate(rows):
            if {name for name in row if name not in skip} != names:
                raise ValueError(f"rows[{index}] has other columns than rows[0]; every row must name the same columns")
        unknown = [name for name in columns if name not in kinds]
        if unknown:
            raise ValueError(f"this store's {table} table has no column(s) {', '.join(map(repr, unknown))}")
        prepared = tuple(
            tuple(stored_value(kinds[name], row[name], f"rows[{index}].{name}") for name in columns)
            for index, row in enumerate(rows)
        )
        return columns, prepared

    async def restore_rows(self, table: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Insert the rows (``dump_rows`` dicts) whose primary key ``table`` does not hold yet; others stay unchanged.

        All rows of one call name the same columns, among them the key; a
        column this store lacks is refused (``ValueError``), one it has and
        the rows omit takes its default. Each value must fit its column's
        kind (:meth:`table_columns`): an int, a number, a str, bytes or
        None, checked before anything is written. ``state_meta`` refuses the
        store's bookkeeping keys. A session whose ``parent_session_id`` names
        no session (in the store or in this call) is stored without the link;
        a title another session holds raises ``ValueError``. One transaction;
        at most 10,000 rows. Returns ``{"inserted": n, "skipped": [key, ...],
        "detached": [session id, ...]}``: the keys (tuples) of rows left alone
        because their key exists, and the sessions stored without their parent.
        """
        table = _table_arg(table)
        rows = _rows_arg(rows)
        if not rows:
            return {"inserted": 0, "skipped": [], "detached": []}
        columns, values = await self._prepared_rows(table, rows)
        key = TABLE_KEYS[table]
        missing = [name for name in key if name not in columns]
        if missing:
            raise ValueError(f"rows of {table} must include the key column(s) {', '.join(missing)}")
        positions = [columns.index(name) for name in key]
        for index, row in enumerate(values):
            for position in positions:
                if not isinstance(row[position], str):
                    raise TypeError(f"rows[{index}].{columns[position]} (a key column) must be a str")
                if table == "sessions":
                    require_id(row[position], f"rows[{index}].id")
            if table == "state_meta" and is_store_meta(row[positions[0]]):
                raise ValueError(f"rows[{index}]: state_meta key {row[positions[0]]!r} is the store's own bookkeeping")
        command = RestoreRows(table=table, columns=columns, rows=values)
        result = await self._write(command, size=sum(_row_size(v) for v in values))
        return {**result, "skipped": [tuple(k) for k in result["skipped"]]}

    async def restore_messages(
        self,
        session_id: str,
        rows: Sequence[Mapping[str, Any]],
        *,
        start: int = 0,
        counters: Mapping[str, Any] | None = None,
    ) -> int:
        """Store ``rows`` (``dump_messages`` dicts) as the session's messages from position ``start`` (0-based, default 0) on.

        Rows go in after the session's existing messages, in the given
        order, with their flags (``active``, ``compacted``, ``observed``) and
        values unchanged; ``id`` is ignored (this store numbers the rows) and
        ``session_id``, when present, must be ``session_id``. Positions the
        session already holds are skipped, so a call repeated after an
        interruption adds nothing twice; a ``start`` beyond the messages the
        session holds raises ``ValueError`` (a gap). No guard or compression
        lease is involved. The session's ``message_count`` and
        ``tool_call_count`` grow by the rows inserted and their tool calls
        (counted as an append counts them), in the same transaction, so they
        agree with the rows after every call. ``counters``, a mapping with
        ``message_count`` and/or ``tool_call_count`` (the source's session row
        from :meth:`dump_rows` will do; other keys are ignored), sets those
        values instead: pass it with the call that completes the session (or
        afterwards, with no rows), so the copy's counters are the source's
        even where they differ from its rows (rewinds, compaction). A session
        row restored with zero counters therefore ends exact and is
        consistent at every step. An unknown session raises
        :class:`~hermes_state.SessionNotFoundError`. Returns how many rows
        were inserted.
        """
        session_id = require_id(session_id)
        first = int64_arg(start, "start")
        if first < 0:
            raise ValueError(f"start must be 0 or more, got {first}")
        rows = _rows_arg(rows)
        for index, row in enumerate(rows):
            owner = row.get("session_id", session_id)
            if owner != session_id:
                raise ValueError(f"rows[{index}].session_id is {owner!r}, not {session_id!r}")
        final = () if counters is None else _counters_arg(counters)
        if not rows and not final:
            return 0
        columns, values = await self._prepared_rows("messages", rows, frozenset({"id", "session_id"})) if rows else ((), ())
        at = columns.index("tool_calls") if "tool_calls" in columns else None
        calls = tuple(0 if at is None else stored_tool_call_count(row[at]) for row in values)
        command = RestoreMessages(session_id=session_id, start=first, columns=columns, rows=values, calls=calls, counters=final)
        return int(await self._write(command, size=sum(_row_size(v) for v in values)))
