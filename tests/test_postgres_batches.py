"""PostgreSQL batches: applied without savepoints first, again with per-command isolation when a command raises."""

from __future__ import annotations

import math

import pytest

from hermes_state import CompressionSessionClosedError, SessionTurnLeaseLostError
from hermes_state.commands import AppendMessages, ReplaceMessages, SetMeta, TurnFence
from hermes_state.encoding import encode_message_dicts
from hermes_state.postgres import SessionDB


pytestmark = pytest.mark.backends("postgres")


async def test_a_raising_command_fails_alone_and_nothing_is_applied_twice(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        await db.create_session("closed", "cli")
        await db.end_session("closed", "compression")
        rows = encode_message_dicts([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])
        commands = [
            AppendMessages(session_id="s", rows=rows),
            AppendMessages(session_id="s", rows=rows[:1], want_id=True),
            SetMeta(key="k", value="v"),
            # Raises inside the handler: the savepoint-free attempt is rolled back and the batch re-run.
            ReplaceMessages(session_id="closed", rows=rows),
            AppendMessages(session_id="s", rows=rows[1:]),
        ]
        outcomes = await db._backend.apply_batch(commands)  # type: ignore[attr-defined]
        assert [ok for ok, _ in outcomes] == [True, True, True, False, True]
        assert outcomes[0][1] == 2 and outcomes[4][1] == 1
        assert isinstance(outcomes[1][1], int)
        error = outcomes[3][1]
        assert type(error) is CompressionSessionClosedError
        assert str(error) == str(CompressionSessionClosedError("closed"))
        # Every row of the re-run batch is there exactly once, in command order, with matching counters.
        assert [m["content"] for m in await db.get_messages("s")] == ["x", "y", "x", "y"]
        assert (await db.get_session("s") or {})["message_count"] == 4
        assert await db.message_count("closed") == 0
        assert await db.get_meta("k") == "v"


async def test_a_clean_batch_commits_in_one_attempt(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        for sid in ("a", "b"):
            await db.create_session(sid, "cli")
        rows = encode_message_dicts([{"role": "user", "content": "x"}])
        commands = [AppendMessages(session_id=sid, rows=rows, want_id=True) for sid in ("a", "b", "a")]
        outcomes = await db._backend.apply_batch(commands)  # type: ignore[attr-defined]
        assert [ok for ok, _ in outcomes] == [True, True, True]
        ids = [value for _, value in outcomes]
        assert ids == sorted(ids) and len(set(ids)) == 3  # one statement, ids in command order
        assert [await db.message_count(sid) for sid in ("a", "b")] == [2, 1]


async def test_a_run_with_fenced_and_refused_appends_keeps_command_order(pg_dsn: str) -> None:
    """One statement judges every fence of a run: refused commands insert nothing, the rest keep their order."""
    async with SessionDB(pg_dsn) as db:
        for sid in ("s", "t", "u"):
            await db.create_session(sid, "cli")
        assert await db.try_acquire_session_turn_lease("s", "worker-a")
        assert await db.try_acquire_session_turn_lease("u", "worker-b")
        mine, theirs = TurnFence(holder="worker-a"), TurnFence(holder="worker-a", token=10**12)
        one = encode_message_dicts([{"role": "user", "content": "1"}])
        two = encode_message_dicts([{"role": "user", "content": "2"}, {"role": "assistant", "content": "3"}])
        commands = [
            AppendMessages(session_id="s", rows=one, want_id=True, fence=mine),
            AppendMessages(session_id="t", rows=two),
            AppendMessages(session_id="u", rows=one, fence=mine),  # worker-b holds u
            AppendMessages(session_id="s", rows=two, want_id=True, fence=mine),
            AppendMessages(session_id="s", rows=one, fence=theirs),  # right holder, another token
            AppendMessages(session_id="u", rows=two),  # unfenced: never refused by a lease
        ]
        outcomes = await db._backend.apply_batch(commands)  # type: ignore[attr-defined]
        assert [ok for ok, _ in outcomes] == [True, True, False, True, False, True]
        assert type(outcomes[2][1]) is SessionTurnLeaseLostError and type(outcomes[4][1]) is SessionTurnLeaseLostError
        rows = await db.get_messages("s")
        assert [m["content"] for m in rows] == ["1", "2", "3"]
        assert [outcomes[0][1], outcomes[3][1]] == [rows[0]["id"], rows[2]["id"]]
        assert [m["content"] for m in await db.get_messages("u")] == ["2", "3"]
        counts = [(await db.get_session(sid) or {})["message_count"] for sid in ("s", "t", "u")]
        assert counts == [3, 2, 2]


async def test_identical_rows_and_varying_columns_round_trip(pg_dsn: str) -> None:
    """Columns equal in every row go to the server once; rows stay distinct and keep their types."""
    async with SessionDB(pg_dsn) as db:
        await db.create_session("s", "cli")
        same = encode_message_dicts([{"role": "tool", "content": {"k": [1, 2]}, "tool_call_id": "c", "timestamp": 5.0}])
        mixed = encode_message_dicts([
            {"role": "user", "content": "plain", "timestamp": 0.0},
            {"role": "user", "content": "nul\x00inside", "timestamp": -0.0, "token_count": 7},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "x", "type": "function",
             "function": {"name": "f", "arguments": "{}"}}], "timestamp": 1.5},
        ])
        commands = [AppendMessages(session_id="s", rows=same), AppendMessages(session_id="s", rows=same),
                    AppendMessages(session_id="s", rows=mixed, want_id=True)]
        outcomes = await db._backend.apply_batch(commands)  # type: ignore[attr-defined]
        assert [value for _, value in outcomes[:2]] == [1, 1]
        got = await db.get_messages("s")
        assert [m["content"] for m in got] == [{"k": [1, 2]}, {"k": [1, 2]}, "plain", "nul\x00inside", None]
        assert outcomes[2][1] == got[-1]["id"]
        assert [m["timestamp"] for m in got] == [5.0, 5.0, 0.0, -0.0, 1.5]
        assert math.copysign(1.0, got[3]["timestamp"]) == -1.0
        assert [m["token_count"] for m in got] == [None, None, None, 7, None]
        assert got[4]["tool_calls"][0]["function"]["name"] == "f"
        session = await db.get_session("s") or {}
        assert (session["message_count"], session["tool_call_count"]) == (5, 1)
