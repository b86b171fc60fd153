"""PostgreSQL batches: applied without savepoints first, again with per-command isolation when a command raises."""

from __future__ import annotations

import pytest

from hermes_state import CompressionSessionClosedError
from hermes_state.commands import AppendMessages, ReplaceMessages, SetMeta
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
