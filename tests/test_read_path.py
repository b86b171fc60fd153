"""``get_messages`` decodes only the cells that need it, with the same result as ``decode_message_row``."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.encoding import decode_message_row
from hermes_state.sqlite.driver import driver_module
from hermes_state.sqlite.queries.core import SLICE_ROWS, fetch_dicts, fetch_messages

# PostgreSQL: SQLite's read-path internals.
pytestmark = pytest.mark.backends("sqlite")

# Raw cells as other writers (or older versions) may have left them.
_CELLS = [
    ("plain", None, None),
    ("\x00json:{\"a\": [1, 2]}", '[{"id": "c1"}]', '{"k": 1}'),
    ("\x00json:not json", "not json", "not json"),
    (b"\x00\x01bytes", "[]", ""),
    (None, '"a string"', '"{\\"double\\": true}"'),
    (42, None, "null"),
    (2.5, "{}", "[1, 2]"),
    ("", None, None),
]


def _decode_both_ways(db_path: Path) -> list[dict[str, Any]]:
    """Insert the raw cells and compare both decoders on a plain connection; returns the decoded rows."""
    conn = driver_module().connect(str(db_path), isolation_level=None)
    try:
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_calls, display_metadata, timestamp) "
            "VALUES ('s', 'user', ?, ?, ?, 1.0)",
            _CELLS,
        )
        sql = "SELECT * FROM messages WHERE session_id = 's' ORDER BY id"
        expected = [decode_message_row(r) for r in fetch_dicts(conn, sql)]
        got = fetch_messages(conn, sql)
        assert got == expected
        assert [type(r["content"]) for r in got] == [type(r["content"]) for r in expected]
        assert list(got[1]) == list(expected[1])  # same keys in the same order
        # A projection without the decoded columns falls back to the general decoder.
        assert fetch_messages(conn, "SELECT id, role FROM messages ORDER BY id") == [
            decode_message_row(r) for r in fetch_dicts(conn, "SELECT id, role FROM messages ORDER BY id")
        ]
        return expected
    finally:
        conn.close()


async def test_fetch_messages_matches_decode_message_row(store: SessionDB, db_path: Path) -> None:
    await store.create_session("s", "test")
    await store.append_message("s", "user", "warm up the schema")
    await store.close()
    # A plain connection blocks: on a worker thread, never on the loop (the suite runs under BlockBuster).
    expected = await asyncio.to_thread(_decode_both_ways, db_path)
    reopened = SessionDB(db_path)
    try:
        assert await reopened.get_messages("s") == expected
    finally:
        await reopened.close()


def _message(i: int) -> dict[str, Any]:
    """Every kind of value that needs decoding, spread so that some fall in each slice and some do not."""
    content: Any = f"plain {i}"
    if i % 7 == 0:
        content = {"parts": [i, "x"]}
    elif i % 11 == 0:
        content = bytes([i % 256, 0, 255])
    elif i % 13 == 0:
        content = "\x00json:not json at all"
    elif i % 17 == 0:
        content = None
    message: dict[str, Any] = {"role": "assistant" if i % 2 else "user", "content": content}
    if i % 5 == 0:
        message["tool_calls"] = [{"id": f"c{i}", "type": "function"}]
    if i % 9 == 0:
        message["display_metadata"] = {"n": i}
    return message


def _plain_read(path: Path, session_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(path)
    try:
        cur = conn.execute("SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id", (session_id,))
        names = [d[0] for d in cur.description]
        return [decode_message_row(dict(zip(names, row))) for row in cur.fetchall()]
    finally:
        conn.close()


async def test_get_messages_across_slices_matches_a_plain_read(store: SessionDB) -> None:
    total = 2 * SLICE_ROWS + 37
    messages = [_message(i) for i in range(total)]
    await store.create_session("s", "cli")
    assert await store.append_messages_batch("s", messages) == total
    # A session whose rows need no decoding at all (every sidecar column NULL in every slice).
    await store.create_session("t", "cli")
    await store.append_messages_batch("t", [{"role": "user", "content": str(i)} for i in range(SLICE_ROWS + 1)])

    got = await store.get_messages("s")
    assert got == _plain_read(store.db_path, "s")
    assert [list(row) for row in got] == [list(row) for row in _plain_read(store.db_path, "s")]  # key order too
    assert [row["content"] for row in got] == [m["content"] for m in messages]
    assert [row["tool_calls"] for row in got] == [m.get("tool_calls") for m in messages]
    assert [row["display_metadata"] for row in got] == [m.get("display_metadata") for m in messages]
    assert await store.get_messages("t") == _plain_read(store.db_path, "t")
    # Paged and newest-first reads cut across slice borders the same way.
    page = await store.get_messages("s", limit=SLICE_ROWS + 3, latest=True)
    assert page == got[-(SLICE_ROWS + 3):]
    assert await store.get_messages("s", offset=SLICE_ROWS - 1, limit=5) == got[SLICE_ROWS - 1 : SLICE_ROWS + 4]
