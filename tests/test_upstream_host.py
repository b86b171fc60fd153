"""What async-hermes-agent's own host code calls on the store, beyond the public API, on both backends.

Its session-search tool reads ``_get_message_storage_state``; its agent binds
per-profile session settings for a turn (``hermes_state_common``); its
PostgreSQL tests create sessions with other columns as keywords; its async
delegation runs SQLAlchemy Core through ``_read`` / ``_write``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest


async def test_message_storage_state_tells_live_archived_and_rewound_rows(store: Any) -> None:
    await store.create_session("s", "cli")
    first = await store.append_message("s", "user", "old question")
    await store.append_message("s", "assistant", "old answer")
    await store.archive_and_compact("s", [{"role": "user", "content": "summary"}])
    question = await store.append_message("s", "user", "new question")
    await store.append_message("s", "assistant", "new answer")
    live = await store.append_message("s", "user", "kept")
    await store.rewind_to_message("s", question)

    assert await store._get_message_storage_state(first) == {"session_id": "s", "active": 0, "compacted": 1}
    assert await store._get_message_storage_state(question) == {"session_id": "s", "active": 0, "compacted": 0}
    summary = (await store.get_messages("s"))[0]["id"]
    assert await store._get_message_storage_state(summary) == {"session_id": "s", "active": 1, "compacted": 0}
    assert live > question
    assert await store._get_message_storage_state(live + 100) is None
    assert await store._get_message_storage_state(0) is None
    assert await store._get_message_storage_state(None) is None
    with pytest.raises(TypeError, match="message_id"):
        await store._get_message_storage_state("12")


async def test_create_session_takes_other_session_columns_on_a_new_row(store: Any) -> None:
    assert await store.create_session(
        "t", "cli", model="m", title="  First\u200b  title ", started_at=1000, end_reason="done", ended_at=1001.5,
        input_tokens=7, archived=1, git_branch="main",
    ) == "t"
    row = await store.get_session("t")
    assert (row["title"], row["started_at"], row["end_reason"], row["ended_at"]) == ("First title", 1000.0, "done", 1001.5)
    assert (row["input_tokens"], row["archived"], row["git_branch"], row["model"]) == (7, 1, "main", "m")

    # An existing row keeps its columns (the named ones are still filled while NULL).
    await store.create_session("t", "cli", title="Other", started_at=5, cwd="/w")
    again = await store.get_session("t")
    assert (again["title"], again["started_at"], again["cwd"]) == ("First title", 1000.0, "/w")

    # None leaves a column at its default.
    await store.create_session("u", "cli", title=None, archived=None)
    plain = await store.get_session("u")
    assert (plain["title"], plain["archived"]) == (None, 0)


async def test_create_session_refuses_unknown_columns_and_wrong_kinds_before_writing(store: Any) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        await store.create_session("x", "cli", bogus=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'message_count'"):
        await store.create_session("x", "cli", message_count=3)
    with pytest.raises(TypeError, match="input_tokens must be an int"):
        await store.create_session("x", "cli", input_tokens="7")
    with pytest.raises(TypeError, match="started_at must be a number"):
        await store.create_session("x", "cli", started_at="yesterday")
    with pytest.raises(ValueError, match="Title too long"):
        await store.create_session("x", "cli", title="t" * 101)
    assert await store.get_session("x") is None
    # ensure_session passes them through too.
    await store.ensure_session("e", title="Ensured")
    assert (await store.get_session("e"))["title"] == "Ensured"


async def test_each_turn_sees_its_own_bound_search_slow_ms(
    store: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import hermes_state_common

    from hermes_state.session_settings import bound_session_setting

    monkeypatch.setenv("HERMES_SEARCH_SLOW_MS", "60000")
    caplog.set_level(logging.INFO, logger="hermes_state.search")
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "docker compose up")
    both_bound = asyncio.Event()
    bound = 0

    async def turn(slow_ms: int, query: str) -> None:
        nonlocal bound
        # As async-hermes-agent's agent does around a turn.
        token = hermes_state_common._set_session_runtime_config({"search_slow_ms": slow_ms})
        try:
            bound += 1
            if bound == 2:
                both_bound.set()
            await both_bound.wait()
            await store.search_messages(query)
        finally:
            hermes_state_common._reset_session_runtime_config(token)

    await asyncio.gather(turn(0, "docker"), turn(60_000, "compose"))
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slow session search")]
    assert len(logged) == 1 and "docker" in logged[0], logged
    # Outside the turns nothing is bound: the environment applies again.
    assert bound_session_setting("search_slow_ms") is None
    assert hermes_state_common._session_runtime_config_value("search_slow_ms", "HERMES_SEARCH_SLOW_MS", "1") == "60000"
    caplog.clear()
    await store.search_messages("docker")
    assert not [r for r in caplog.records if r.getMessage().startswith("slow session search")]


def test_session_settings_binding_checks_its_argument() -> None:
    from hermes_state.session_settings import bind_session_settings

    with pytest.raises(TypeError, match="values must be a mapping or None"):
        bind_session_settings([("cjk_fts", False)])  # type: ignore[arg-type]


async def test_sqlite_store_offers_no_core_boundary(db_path: Any) -> None:
    """async-hermes-agent binds a store for delegation SQL only when both are callable: SQLite keeps its sidecar."""
    from hermes_state import SessionDB

    db = SessionDB(db_path)
    try:
        assert not callable(getattr(db, "_read", None))
    finally:
        await db.close()


async def test_postgres_read_and_write_run_sqlalchemy_core_operations(pg_dsn: str) -> None:
    from sqlalchemy import text

    from hermes_state.postgres import SessionDB as PostgresSessionDB

    db = PostgresSessionDB(pg_dsn)
    try:
        async def insert(connection: Any) -> int:
            result = await connection.execute(
                text(
                    "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at, updated_at) "
                    "VALUES (:id, 'origin', 'running', 1.0, 2.0)"
                ),
                {"id": "d1"},
            )
            return int(result.rowcount)

        assert await db._write(insert) == 1

        async def failing(connection: Any) -> None:
            await connection.execute(text("UPDATE async_delegations SET state = 'done' WHERE delegation_id = 'd1'"))
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await db._write(failing)  # rolled back as a whole

        async def read(connection: Any) -> list[tuple[str, str]]:
            rows = await connection.execute(text("SELECT delegation_id, state FROM async_delegations"))
            return [tuple(r) for r in rows.fetchall()]

        assert await db._read(read) == [("d1", "running")]
        # The store's own writes still take the queue, beside the host's.
        await db.create_session("s", "cli")
        assert (await db.get_session("s"))["source"] == "cli"
        rows = await db.dump_rows("async_delegations")
        assert [r["delegation_id"] for r in rows] == ["d1"]
        with pytest.raises(TypeError, match="operation must be a coroutine function"):
            await db._write("DELETE FROM async_delegations")
    finally:
        await db.close()

    reader = PostgresSessionDB(pg_dsn, read_only=True)
    try:
        assert await reader._read(read) == [("d1", "running")]
        with pytest.raises(PermissionError):
            await reader._write(insert)
    finally:
        await reader.close()
