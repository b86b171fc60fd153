"""Export from SQLite, import into PostgreSQL, export again and import back into SQLite: nothing changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_state import SessionDB
from hermes_state.postgres import SessionDB as PostgresSessionDB
from tests.test_export import populate


def without_row_ids(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The export with message row ids dropped (an import numbers rows afresh)."""
    return [{**s, "messages": [{k: v for k, v in m.items() if k != "id"} for m in s["messages"]]} for s in sessions]


async def fill(db: SessionDB) -> None:
    """The export fixture's sessions plus values that need the backends' special encodings."""
    await populate(db)
    await db.create_session("odd", "cli", model_config={"nested": {"list": [1, 2.5, None, True]}})
    for content in ["nul\x00inside", "\x00json:[1]", 7, 2.5, False, {"k": [None, "x"]}, "", None]:
        await db.append_message("odd", "assistant", content, reasoning="why", finish_reason="stop", token_count=2**63 - 1)
    await db.update_token_counts("odd", input_tokens=2**63 - 1, estimated_cost_usd=1e300, model="m")
    await db.set_session_title("odd", "Odd one")


async def test_sqlite_to_postgres_and_back_is_identical(db_path: Path, pg_dsn: str, tmp_path: Path) -> None:
    source = SessionDB(db_path)
    middle = PostgresSessionDB(pg_dsn)
    target = SessionDB(tmp_path / "back" / "state.db")
    try:
        await fill(source)
        exported = json.loads(json.dumps(await source.export_all()))  # through JSON text, as a file would
        assert (await middle.import_sessions(exported))["ok"] is True
        via_postgres = await middle.export_all()
        assert without_row_ids(via_postgres) == without_row_ids(exported)

        streamed = tmp_path / "pg.jsonl"
        assert await middle.export_all_to(streamed) == len(exported)
        lines = [json.loads(line) for line in streamed.read_text().splitlines()]
        assert (await target.import_sessions(lines))["ok"] is True
        # Both imports numbered rows from 1 in the same order: now even the row ids agree.
        assert await target.export_all() == via_postgres
        for session in via_postgres:
            assert await target.get_messages(session["id"]) == await middle.get_messages(session["id"])
    finally:
        for db in (source, middle, target):
            await db.close()
