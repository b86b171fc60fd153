"""``get_messages`` decodes only the cells that need it, with the same result as ``decode_message_row``."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.encoding import decode_message_row
from hermes_state.sqlite.driver import driver_module
from hermes_state.sqlite.queries.core import fetch_dicts, fetch_messages

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


async def test_fetch_messages_matches_decode_message_row(store: SessionDB, db_path: Path) -> None:
    await store.create_session("s", "test")
    await store.append_message("s", "user", "warm up the schema")
    await store.close()
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
    finally:
        conn.close()
    reopened = SessionDB(db_path)
    try:
        assert await reopened.get_messages("s") == expected
    finally:
        await reopened.close()
