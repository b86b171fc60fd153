"""The row API (``dump_rows``/``find_rows``/``dump_messages``/``restore_rows``/``restore_messages``) on both backends.

A store with every kind of row, restored row by row into a fresh store of
the same backend, reads back identical table by table and through the
ordinary reads; restores skip what exists (a repeat adds nothing), refuse
what cannot be stored unchanged before anything is queued, and never touch
rows already there. Copies between the backends are tested through the
command (tests/test_cli_copy.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionNotFoundError
from hermes_state.tables import KEYED_TABLES, TABLE_KEYS

from .conftest import fresh_store
from .full_store import ROW_COUNTS, fill_every_kind, raw_counts, snapshot
from .raw_sql import fetch_rows, is_postgres


@pytest.fixture
async def twin(store: Any, tmp_path: Path) -> AsyncIterator[Any]:
    """A second, empty store on the same backend as ``store``."""
    async for db in fresh_store("postgres" if is_postgres(store) else "sqlite", tmp_path / "twin" / "state.db"):
        yield db


ZERO = {"message_count": 0, "tool_call_count": 0}

# Sessions whose message_count cannot be right: doctor's rule (above the rows held, or different
# from them while every row is active and uncompacted).
DRIFTED = """
SELECT s.id FROM sessions AS s
WHERE COALESCE(s.message_count, 0) > (SELECT COUNT(*) FROM messages AS m WHERE m.session_id = s.id)
   OR (COALESCE(s.message_count, 0) <> (SELECT COUNT(*) FROM messages AS m WHERE m.session_id = s.id)
       AND NOT EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = s.id
                       AND (COALESCE(m.active, 0) <> 1 OR COALESCE(m.compacted, 0) <> 0)))
ORDER BY s.id
"""


async def counters(db: Any, session_id: str) -> tuple[Any, Any]:
    (row,) = await db.find_rows("sessions", [session_id])
    return row["message_count"], row["tool_call_count"]


async def restore_everything(
    source: Any, target: Any, page: int = 5, after_each: Callable[[str, int], Awaitable[None]] | None = None
) -> None:
    """Every keyed table page by page (sessions with zero counters), each session's messages in pages, then its counters.

    ``after_each(session id, rows restored)`` runs after every call that writes messages.
    """
    for table in KEYED_TABLES:
        after = None
        while True:
            rows = await source.dump_rows(table, after=after, limit=page)
            if not rows:
                break
            await target.restore_rows(table, [{**row, **ZERO} for row in rows] if table == "sessions" else rows)
            after = tuple(rows[-1][name] for name in TABLE_KEYS[table])
    for session in await source.dump_rows("sessions", limit=1000):
        after_id, position = None, 0
        while True:
            rows = await source.dump_messages(session["id"], after_id=after_id, limit=page)
            if not rows:
                break
            await target.restore_messages(session["id"], rows, start=position)
            position += len(rows)
            after_id = rows[-1]["id"]
            if after_each is not None:
                await after_each(session["id"], position)
        await target.restore_messages(session["id"], [], start=position, counters=session)


async def test_every_kind_of_row_survives_a_row_by_row_restore(store: Any, twin: Any) -> None:
    await fill_every_kind(store)
    await restore_everything(store, twin)
    assert await raw_counts(twin) == await raw_counts(store) == ROW_COUNTS
    before, after = await snapshot(store), await snapshot(twin)
    for table in before["tables"]:
        assert after["tables"][table] == before["tables"][table], table
    assert after["reads"] == before["reads"]
    assert after["search"] == before["search"]
    values = after["reads"]["values"]["messages"]
    assert [type(m["content"]) for m in values[:14]] == [str, str, str, str, str, int, float, float, bool, bool, dict, list,
                                                         bytes, type(None)]
    archived = [m for m in after["tables"]["messages"]["compacted"] if m["active"] == 0]
    assert len(archived) == 6 and all(m["compacted"] == 1 for m in archived)
    assert await twin.get_meta("last_vacuum") is None  # the store's own bookkeeping stays behind
    assert await fetch_rows(twin, "SELECT count(*) FROM state_meta WHERE key = 'turn_lease_token'") == [(0,)]
    assert await fetch_rows(twin, "SELECT count(*) FROM session_turn_leases") == [(0,)]  # leases are not data
    sessions = {row["id"]: row for row in after["tables"]["sessions"]}
    assert sessions["empty"]["hidden"] == 1 and sessions["lineage-tip"]["conversation_id"] == "lineage-root"


async def test_counters_agree_with_the_rows_at_every_step_and_end_as_the_source_s(store: Any, twin: Any) -> None:
    await fill_every_kind(store)
    # Tool calls as the store counts them: a list counts its items, an object one, unparsable text none.
    await store.create_session("calls", "cli")
    for calls in ([{"id": "a"}, {"id": "b"}, {"id": "c"}], {"id": "d"}, "not json", None, "[1, 2]"):
        await store.append_message("calls", "assistant", "x", tool_calls=calls)
    # A transcript replaced with the old rows kept (inactive): counted from the new rows only.
    await store.create_session("replaced", "cli")
    await store.append_messages_batch("replaced", [{"role": "user", "content": f"draft {i}"} for i in range(4)])
    await store.replace_messages("replaced", [{"role": "user", "content": "final"}], archive_dropped=True)
    sources = {row["id"]: row for row in await store.dump_rows("sessions", limit=1000)}
    held = {sid: await store.message_count(sid) for sid in sources}
    assert sources["calls"]["tool_call_count"] == 6
    for session_id in ("compacted", "replaced"):  # counters that differ from the rows
        assert sources[session_id]["message_count"] < held[session_id], session_id
    assert await fetch_rows(store, DRIFTED) == []

    async def check(session_id: str, restored: int) -> None:
        assert await fetch_rows(twin, DRIFTED) == []  # doctor's rule holds after every call
        message_count, tool_calls = await counters(twin, session_id)
        assert message_count == restored == await twin.message_count(session_id)
        if restored == held[session_id] and sources[session_id]["message_count"] == restored:
            assert tool_calls == sources[session_id]["tool_call_count"], session_id  # counted as the store counts
        if is_postgres(twin):
            assert await twin.integrity_problems() == []

    await restore_everything(store, twin, page=3, after_each=check)
    for session_id, row in sources.items():
        assert await counters(twin, session_id) == (row["message_count"], row["tool_call_count"]), session_id
    assert await fetch_rows(twin, DRIFTED) == []
    # Repeating the last call changes nothing; counters alone can be set (and only what they name).
    assert await twin.restore_messages("calls", [], start=5, counters=sources["calls"]) == 0
    assert await counters(twin, "calls") == (5, 6)
    assert await twin.restore_messages("calls", [], counters={"tool_call_count": None, "title": "ignored"}) == 0
    assert await counters(twin, "calls") == (5, None)
    with pytest.raises(SessionNotFoundError):
        await twin.restore_messages("ghost", [], counters=ZERO)


async def test_a_repeated_restore_adds_nothing_and_changes_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    await store.append_messages_batch("s", [{"role": "user", "content": f"m{i}"} for i in range(5)])
    await store.set_meta("k", "v")
    rows = await store.dump_rows("sessions")
    assert await store.restore_rows("sessions", rows) == {"inserted": 0, "skipped": [("s",)], "detached": []}
    changed = [{**rows[0], "model": "another"}]
    assert (await store.restore_rows("sessions", changed))["skipped"] == [("s",)]
    assert (await store.get_session("s") or {})["model"] is None  # a row that exists is never changed
    meta = await store.find_rows("state_meta", ["k"])
    assert meta == [{"key": "k", "value": "v"}]
    assert (await store.restore_rows("state_meta", [{"key": "k", "value": "other"}]))["inserted"] == 0
    messages = await store.dump_messages("s")
    assert await store.restore_messages("s", messages, start=0) == 0
    assert await store.restore_messages("s", messages[3:], start=3) == 0
    assert await counters(store, "s") == (5, 0)  # nothing added, nothing counted
    assert await store.restore_messages("s", [{**messages[4], "content": "m5"}], start=5) == 1  # past the end: added
    assert await counters(store, "s") == (6, 0)
    with pytest.raises(ValueError, match="would leave a gap"):
        await store.restore_messages("s", messages[:1], start=9)
    assert [m["content"] for m in await store.get_messages("s")] == ["m0", "m1", "m2", "m3", "m4", "m5"]


async def test_links_titles_and_missing_sessions(store: Any) -> None:
    child = {"id": "child", "source": "cli", "started_at": 1.0, "parent_session_id": "parent", "title": "Child"}
    parent = {"id": "parent", "source": "cli", "started_at": 0.5, "parent_session_id": None, "title": "Parent"}
    # A child before its parent in one call is linked; a parent that is nowhere leaves the child detached.
    assert await store.restore_rows("sessions", [child, parent]) == {"inserted": 2, "skipped": [], "detached": []}
    assert (await store.get_session("child") or {})["parent_session_id"] == "parent"
    orphan = {**child, "id": "orphan", "parent_session_id": "nowhere", "title": None}
    assert (await store.restore_rows("sessions", [orphan]))["detached"] == ["orphan"]
    with pytest.raises(ValueError, match="'taken'.*already used by session 'parent'"):
        await store.restore_rows("sessions", [{**parent, "id": "taken", "title": "Parent"}])
    assert await store.get_session("taken") is None
    with pytest.raises(SessionNotFoundError):
        await store.restore_messages("ghost", [{"role": "user", "content": "x", "timestamp": 1.0}], start=0)
    found = await store.find_rows("sessions", [("parent",), "child", "ghost"])
    assert [row["id"] for row in found] == ["child", "parent"]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda db: db.dump_rows("messages"), ValueError, "dump_messages"),
        (lambda db: db.dump_rows("compression_locks"), ValueError, "table must be one of"),
        (lambda db: db.dump_rows("sessions", after=("a", "b")), TypeError, "sequence of 1 str"),
        (lambda db: db.dump_rows("sessions", limit=0), ValueError, "limit"),
        (lambda db: db.dump_rows("state_meta", session_id="s"), ValueError, "session_id filters"),
        (lambda db: db.find_rows("sessions", "s"), TypeError, "keys must be a list"),
        (lambda db: db.restore_rows("sessions", {"id": "s"}), TypeError, "rows must be a list"),
        (lambda db: db.restore_rows("sessions", [{"source": "cli", "started_at": 1.0}]), ValueError, "key column"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "nonsense": 1}]), ValueError, "no column.*'nonsense'"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "started_at": "soon"}]), TypeError, r"rows\[0\]\.started_at"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "message_count": 1.5}]), TypeError, "message_count must be an int"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "message_count": True}]), TypeError, "message_count"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "started_at": float("nan")}]), ValueError, "NaN"),
        (lambda db: db.restore_rows("sessions", [{"id": "s", "title": b"x"}]), TypeError, "title must be a str"),
        (lambda db: db.restore_rows("sessions", [{"id": "a"}, {"id": "b", "title": "t"}]), ValueError, "same columns"),
        (lambda db: db.restore_rows("state_meta", [{"key": "fts_stale", "value": "1"}]), ValueError, "bookkeeping"),
        (lambda db: db.restore_messages("s", [{"role": "user"}], start=-1), ValueError, "start must be 0 or more"),
        (lambda db: db.restore_messages("s", [{"session_id": "t", "role": "user"}], start=0), ValueError, "not 's'"),
        (lambda db: db.restore_messages("s", [{"role": "user", "content": 5}], start=0), TypeError, "str or bytes"),
        (lambda db: db.restore_messages("s", [], counters=5), TypeError, "counters must be a mapping"),
        (lambda db: db.restore_messages("s", [], counters={}), ValueError, "message_count and/or tool_call_count"),
        (lambda db: db.restore_messages("s", [], counters={"message_count": 1.5}), TypeError,
         r"counters\['message_count'\] must be an int"),
        (lambda db: db.restore_messages("s", [], counters={"tool_call_count": True}), TypeError, "tool_call_count"),
        (lambda db: db.restore_messages("s", [], counters={"message_count": 2**63}), ValueError, "64-bit"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_queued(store: Any, call: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        await call(store)
    assert (await store.writer_stats())["commands"] == 0


@pytest.mark.backends("postgres")
async def test_postgres_refuses_nul_outside_message_content_at_the_call(store: Any) -> None:
    with pytest.raises(ValueError, match=r"rows\[0\]\.title must not contain NUL.*table sessions"):
        await store.restore_rows("sessions", [{"id": "s", "source": "cli", "started_at": 1.0, "title": "a\x00b"}])
    await store.create_session("s", "cli")
    rows = [{"role": "user", "content": "keeps \x00 here", "timestamp": 1.0, "reasoning": None}]
    assert await store.restore_messages("s", rows, start=0) == 1
    with pytest.raises(ValueError, match=r"rows\[0\]\.reasoning must not contain NUL"):
        await store.restore_messages("s", [{**rows[0], "reasoning": "x\x00"}], start=1)
    assert (await store.get_messages("s"))[0]["content"] == "keeps \x00 here"
