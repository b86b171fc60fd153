"""The write path at the SQLite limit: multi-row inserts and optimistic group commits.

Message rows go to SQLite as one multi-row ``INSERT`` per chunk; these tests
check that every value keeps exactly the column value and type a one-row
insert would store, that ids come back in list order (each caller its own),
that statements stay bounded, and that a healthy batch runs without a single
savepoint while a poisoned one still isolates its bad command.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB, SessionNotFoundError
from hermes_state.encoding import encode_message_args, encode_message_dicts, encode_text_turn
from hermes_state.sqlite.driver import driver_module
from hermes_state.sqlite.handlers.message_rows import (
    MAX_ROWS_PER_STATEMENT,
    MESSAGE_COLUMNS,
    chunk_sizes,
)

# PostgreSQL: SQLite's write-path internals.
pytestmark = pytest.mark.backends("sqlite")

_PROBE_COLUMNS = ", ".join(f"typeof({c}), {c}" for c in MESSAGE_COLUMNS[1:])


def _messages(n: int, tag: str) -> list[dict[str, Any]]:
    """Messages whose optional columns are set on some rows only, with awkward values mixed in."""
    contents: list[Any] = [
        f"{tag} plain text",
        b"\x00\xffraw bytes",
        None,
        {"type": "image", "parts": [1, 2.5, None]},
        [{"type": "text", "text": "structured"}],
        "lone \ud800 surrogate",
        "\x00json:{\"looks\": \"like a marker\"}",
        "",
        "ünïcødé ✓ 中文",
    ]
    out = []
    for i in range(n):
        message: dict[str, Any] = {"role": ("user", "assistant", "tool")[i % 3], "content": contents[i % len(contents)]}
        if i % 7 == 0:
            message["tool_name"] = f"tool-{i}"
            message["tool_call_id"] = f"call-{i}"
        if i % 11 == 0:
            message["tool_calls"] = [{"id": f"c{i}", "function": {"name": "f", "arguments": "{}"}}]
        if i % 5 == 0:
            message["token_count"] = i
            message["finish_reason"] = "stop"
        if i % 13 == 0:
            message["reasoning"] = f"thinking {i}"
            message["reasoning_details"] = [{"step": i}]
            message["codex_reasoning_items"] = [{"id": i}]
            message["codex_message_items"] = [{"m": i}]
            message["reasoning_content"] = "rc"
        if i % 17 == 0:
            message["platform_message_id"] = i
            message["observed"] = True
            message["api_content"] = "api"
            message["display_kind"] = "card"
            message["display_metadata"] = {"k": i}
            message["effect_disposition"] = "applied"
        if i % 19 == 0:
            message["timestamp"] = 1_700_000_000.123456 + i
        out.append(message)
    return out


def _raw(path: Path, session_id: str) -> list[tuple[Any, ...]]:
    conn = driver_module().connect(str(path))
    try:
        return conn.execute(
            f"SELECT {_PROBE_COLUMNS} FROM messages WHERE session_id = ? AND active = 1 ORDER BY id", (session_id,)
        ).fetchall()
    finally:
        conn.close()


def _reference_rows(path: Path, rows: Any) -> list[tuple[Any, ...]]:
    """The same encoded rows written one statement per row (the old path), read back raw."""
    from hermes_state.sqlite.schema import SCHEMA_SQL

    conn = driver_module().connect(str(path), isolation_level=None)
    try:
        conn.executescript(SCHEMA_SQL)
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('ref', 'test', 0)")
        marks = ", ".join("?" * len(MESSAGE_COLUMNS))
        sql = f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES ({marks})"
        conn.execute("BEGIN")
        for row in rows:
            conn.execute(sql, ("ref", *(getattr(row, c) for c in MESSAGE_COLUMNS[1:])))
        conn.execute("COMMIT")
        return conn.execute(f"SELECT {_PROBE_COLUMNS} FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


def test_chunk_sizes_cover_every_row_with_few_bounded_statements() -> None:
    distinct: set[int] = set()
    for total in [*range(300), 999, 1000, 1001, 1337, 2500, 10_000, 100_000]:
        sizes = chunk_sizes(total)
        assert sum(sizes) == total
        assert all(0 < s <= MAX_ROWS_PER_STATEMENT for s in sizes)
        assert all(s * len(MESSAGE_COLUMNS) <= 32766 for s in sizes)
        # A run of up to 64 rows is one statement; longer runs need only a handful more.
        if 0 < total <= 64:
            assert sizes == [total]
        assert len(sizes) <= total // MAX_ROWS_PER_STATEMENT + 5
        distinct.update(sizes)
    # The statement cache sees a bounded set of row counts, not one per run length.
    assert len(distinct) <= 64 + 5


@pytest.mark.parametrize("n", [1, 64, 65, 451, 2 * MAX_ROWS_PER_STATEMENT + 7])
async def test_batch_stores_exactly_what_one_row_inserts_store(store: SessionDB, db_path: Path, tmp_path: Path, n: int) -> None:
    messages = _messages(n, "b")
    await store.create_session("s", "test")
    assert await store.append_messages_batch("s", messages) == n
    stored = _raw(db_path, "s")
    rows = encode_message_dicts(messages)
    expected = _reference_rows(tmp_path / "reference.db", rows)
    # Timestamps defaulted from the clock differ between the two encodings; compare the rest.
    ts = 2 * MESSAGE_COLUMNS[1:].index("timestamp")
    strip = lambda r: r[:ts + 1] + r[ts + 2 :]
    assert [strip(r) for r in stored] == [strip(r) for r in expected]
    for got, message in zip(stored, messages):
        if "timestamp" in message:
            assert got[ts + 1] == message["timestamp"]
    read = await store.get_messages("s")
    for got, message in zip(read, messages):
        content = message["content"]
        if isinstance(content, str) and content.startswith("\x00json:"):
            continue  # how marker-like text reads back is the encoding's rule; its column value is pinned above
        if isinstance(content, str):
            content = content.replace("\ud800", "\ufffd")
        assert got["content"] == content and type(got["content"]) is type(content)
    session = await store.get_session("s")
    assert session is not None
    assert session["message_count"] == n
    assert session["tool_call_count"] == sum(1 for i in range(n) if i % 11 == 0)


async def test_replace_compact_and_child_keep_list_order(store: SessionDB, db_path: Path) -> None:
    n = MAX_ROWS_PER_STATEMENT + 300
    messages = [{"role": "user", "content": f"m{i}"} for i in range(n)]
    await store.create_session("r", "test")
    await store.append_message("r", "user", "old")
    await store.replace_messages("r", messages)
    assert [m["content"] for m in await store.get_messages("r")] == [f"m{i}" for i in range(n)]
    assert await store.archive_and_compact("r", messages[::-1]) == n
    assert [m["content"] for m in await store.get_messages("r")] == [f"m{i}" for i in reversed(range(n))]
    await store.publish_compression_child(
        parent_session_id="r", child_session_id="c", source="test", messages=messages,
        require_compression_lease=False,
    )
    assert [m["content"] for m in await store.get_messages("c")] == [f"m{i}" for i in range(n)]
    result = await store.import_sessions(
        [{"id": "imp", "source": "test", "messages": messages}, {"id": "imp2", "source": "test", "messages": messages[:3]}]
    )
    assert result["ok"], result
    assert [m["content"] for m in await store.get_messages("imp")] == [f"m{i}" for i in range(n)]
    assert [m["content"] for m in await store.get_messages("imp2")] == ["m0", "m1", "m2"]
    for sid in ("r", "c", "imp", "imp2"):
        session = await store.get_session(sid)
        assert session is not None and session["message_count"] == len(await store.get_messages(sid))


async def test_each_concurrent_caller_gets_the_id_of_its_own_row(store: SessionDB) -> None:
    sessions = [f"s{i}" for i in range(20)]
    for sid in sessions:
        await store.create_session(sid, "test")
    await store.create_session("busy", "test")
    # A big batch keeps the writer busy so the appends below share a batch.
    big = asyncio.ensure_future(store.append_messages_batch("busy", [{"role": "user", "content": "x"}] * 3000))
    await asyncio.sleep(0.01)
    batches0 = store._actor.batches

    async def agent(sid: str) -> list[tuple[int, str]]:
        out = []
        for j in range(15):
            text = f"{sid}/{j}"
            out.append((await store.append_message(sid, "user", text), text))
        return out

    expected = [pair for got in await asyncio.gather(*(agent(s) for s in sessions)) for pair in got]
    await big
    assert store._actor.batches - batches0 < len(expected), "appends never shared a batch"
    ids = [i for i, _ in expected]
    assert len(set(ids)) == len(ids)
    by_id = {}
    for sid in sessions:
        for row in await store.get_messages(sid):
            by_id[row["id"]] = row["content"]
    assert {i: by_id[i] for i in ids} == dict(expected)


def _trace(store: SessionDB) -> list[str]:
    """Record the head of every statement the writer connection starts.

    SQLite reports a statement again each time one of its triggers runs, and
    reports FTS5's own statements as ``-- ...`` comments; the repeats are
    folded and the comments dropped, so each entry is one execution.
    """
    statements: list[str] = []
    last = [""]

    def seen(sql: str) -> None:
        if sql.startswith("--") or sql == last[0]:
            return
        last[0] = sql
        statements.append(sql.lstrip()[:60].upper())

    raw = store._backend._writer_conn._conn  # type: ignore[union-attr]
    raw.set_trace_callback(seen)
    return statements


async def test_healthy_batch_uses_no_savepoints_and_one_insert_per_run(store: SessionDB) -> None:
    for i in range(30):
        await store.create_session(f"s{i}", "test")
    await store.create_session("busy", "test")
    statements = _trace(store)
    batches0 = store._actor.batches
    big = asyncio.ensure_future(store.append_messages_batch("busy", [{"role": "user", "content": "x"}] * 70))
    await asyncio.sleep(0)
    await asyncio.gather(*(store.append_message(f"s{i}", "user", f"hello {i}") for i in range(30)))
    await big
    batches = store._actor.batches - batches0
    assert not [s for s in statements if s.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK"))]
    inserts = [s for s in statements if s.startswith("INSERT INTO MESSAGES")]
    # The 70 rows take their few bounded statements; the appends one per batch they landed in.
    assert batches < 30, "the appends did not share a batch"
    assert len(inserts) == len(chunk_sizes(70)) + (batches - 1)
    assert statements.count("COMMIT") == batches
    assert await store.message_count() == 100


async def test_poisoned_batch_falls_back_to_savepoints_and_neighbours_commit(store: SessionDB) -> None:
    for i in range(10):
        await store.create_session(f"s{i}", "test")
    await store.create_session("busy", "test")
    statements = _trace(store)
    big = asyncio.ensure_future(store.append_messages_batch("busy", [{"role": "user", "content": "x"}] * 500))
    await asyncio.sleep(0)
    calls = [store.append_message(f"s{i}", "user", f"hello {i}") for i in range(10)]
    calls.insert(5, store.create_session("orphan", "test", parent_session_id="no-such-parent"))
    calls.insert(8, store.end_session("s1", "done"))
    results = await asyncio.gather(*calls, return_exceptions=True)
    await big
    assert isinstance(results[5], SessionNotFoundError)
    assert isinstance(results[5], sqlite3.IntegrityError)
    assert [r for i, r in enumerate(results) if i != 5 and isinstance(r, BaseException)] == []
    assert any(s.startswith("SAVEPOINT") for s in statements), "no isolated re-run happened"
    for i in range(10):
        assert [m["content"] for m in await store.get_messages(f"s{i}")] == [f"hello {i}"]
    assert await store.get_session("orphan") is None
    ended = await store.get_session("s1")
    assert ended is not None and ended["end_reason"] == "done"


async def test_old_variable_limit_keeps_statements_small_and_rows_exact(
    store: SessionDB, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_state.sqlite.handlers import message_rows

    # A build with the pre-3.32 default of 999 bound values per statement.
    monkeypatch.setattr(message_rows, "_variable_limit", lambda: 999)
    assert max(chunk_sizes(300)) == 999 // len(MESSAGE_COLUMNS)
    messages = _messages(300, "old")
    await store.create_session("s", "test")
    statements = _trace(store)
    assert await store.append_messages_batch("s", messages) == 300
    inserts = [s for s in statements if s.startswith("INSERT INTO MESSAGES")]
    assert len(inserts) == len(chunk_sizes(300))
    ts = 2 * MESSAGE_COLUMNS[1:].index("timestamp")
    strip = lambda r: r[: ts + 1] + r[ts + 2 :]
    expected = _reference_rows(tmp_path / "reference.db", encode_message_dicts(messages))
    assert [strip(r) for r in _raw(db_path, "s")] == [strip(r) for r in expected]


# The plain turn (str role and content, nothing else) skips the optional columns.
_TURNS = [
    ("user", "plain"),
    ("assistant", ""),
    ("user", "caf\u00e9 \u4e2d\u6587"),
    ("user", "lone \ud800 surrogate"),
    ("tool", '\x00json:{"a": 1}'),
    ("us\udfffer", "x"),
    ("system", "\x00json:"),
]
_NONE_ARGS = dict.fromkeys(
    (
        "tool_name", "tool_calls", "tool_call_id", "token_count", "finish_reason", "reasoning", "reasoning_content",
        "reasoning_details", "codex_reasoning_items", "codex_message_items", "platform_message_id",
        "effect_disposition", "api_content", "display_kind", "display_metadata",
    )
)


def test_text_turn_encodes_like_the_general_path() -> None:
    for role, content in _TURNS:
        for observed in (False, True, 0, 1):
            fast = encode_text_turn(role, content, observed)
            full = encode_message_args(
                role=role, content=content, observed=observed, timestamp=fast.timestamp, **_NONE_ARGS
            )
            assert fast == full, (role, content, observed)


async def test_sequential_appends_get_their_own_ids_and_values_back(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    ids = [await store.append_message("s", role, content) for role, content in _TURNS]
    ids.append(await store.append_message("s", "user", "with a column", token_count=7))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    rows = await store.get_messages("s")
    assert [r["id"] for r in rows] == ids
    expected = [c.replace("\ud800", "\ufffd") for _, c in _TURNS] + ["with a column"]
    assert [r["content"] for r in rows] == expected
    assert rows[5]["role"] == "us\ufffder" and rows[-1]["token_count"] == 7
    assert (await store.get_session("s") or {})["message_count"] == len(ids)


async def test_lone_append_runs_one_guard_query_and_no_savepoint(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    statements = _trace(store)
    await store.append_message("s", "user", "alone in its batch")
    heads = [s.split(" ", 2)[:2] for s in statements]
    assert heads == [["BEGIN", "IMMEDIATE"], ["SELECT", "S.ID"], ["INSERT", "INTO"], ["UPDATE", "SESSIONS"], ["COMMIT"]]


def test_lone_append_guard_gives_the_batch_guards_verdict(tmp_path: Path) -> None:
    """The one-query guard of a lone append refuses exactly what ``append_verdicts`` refuses, with the same error."""
    import time

    from hermes_state.commands.leases import TurnFence
    from hermes_state.commands.messages import AppendMessages
    from hermes_state.sqlite.handlers.common import append_verdicts
    from hermes_state.sqlite.handlers.messages import append_messages
    from hermes_state.sqlite.schema import SCHEMA_SQL

    conn = driver_module().connect(str(tmp_path / "guards.db"), isolation_level=None)
    try:
        conn.executescript(SCHEMA_SQL)
        now = time.time()
        sessions = {"open": (None, None), "ended": (now, "user"), "compressed": (now, "compression"), "missing": None}
        leases = {"none": None, "other": ("worker-b", 1, now + 60), "mine": ("worker-a", 1, now + 60),
                  "mine-expired": ("worker-a", 1, now - 60), "mine-old-token": ("worker-a", 2, now + 60)}
        fences = (None, TurnFence(holder="worker-a"), TurnFence(holder="worker-a", token=1))
        seen = set()
        for state, ended in sessions.items():
            for lease, held in leases.items():
                for fence in fences:
                    case = (state, lease, fence)

                    def arrange(ended: Any = ended, held: Any = held) -> None:
                        conn.execute("BEGIN")
                        if ended is not None:
                            conn.execute(
                                "INSERT INTO sessions (id, source, started_at, ended_at, end_reason, conversation_id) "
                                "VALUES ('s', 't', 0, ?, ?, 's')",
                                ended,
                            )
                        if held is not None:
                            conn.execute(
                                "INSERT INTO session_turn_leases (conversation_id, holder, token, acquired_at, expires_at) "
                                "VALUES ('s', ?, ?, 0, ?)",
                                held,
                            )

                    def renewed() -> bool:
                        row = conn.execute("SELECT expires_at FROM session_turn_leases").fetchone()
                        return row is not None and row[0] > now

                    arrange()
                    [expected] = append_verdicts(conn, [("s", fence)], time.time())
                    batch_renewed = renewed()
                    conn.execute("ROLLBACK")
                    arrange()
                    command = AppendMessages(
                        session_id="s", rows=(encode_text_turn("user", "hi"),), want_id=True, fence=fence
                    )
                    try:
                        got: BaseException | None = None
                        append_messages(conn, command)
                    except Exception as exc:  # noqa: BLE001 - compared below
                        got = exc
                    assert renewed() == batch_renewed, case
                    if fence is not None and held is not None and expected is None:
                        assert batch_renewed, case  # an admitted fence renews its expired lease
                    conn.execute("ROLLBACK")
                    assert type(got) is type(expected), case
                    assert str(got) == str(expected), case
                    seen.add(type(expected).__name__)
        assert seen == {"NoneType", "SessionNotFoundError", "CompressionSessionClosedError", "SessionTurnLeaseLostError"}
    finally:
        conn.close()
