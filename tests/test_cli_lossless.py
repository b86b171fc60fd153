"""Nothing is lost when a store moves: a store with every kind of row, compared table by table, in all four directions.

SQLite -> PostgreSQL (``copy --to``), PostgreSQL -> SQLite (``copy --from``),
and ``export`` -> ``import`` on each backend, through the command as a user
runs it. Each target reads back equal to its source in type and value:
every table through the row API, every session and every message (archived,
compacted and rewound ones included) through the ordinary reads, and the
same search hits. A planted difference is caught by ``verify``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.postgres import SessionDB as PostgresSessionDB

from .cli_support import run_cli, run_json
from .full_store import ROW_COUNTS, assert_same, fill_every_kind, raw_counts, snapshot
from .postgres_support import server_dsn, store_dsn, temporary_schema
from .raw_sql import raw_exec


def as_url(dsn: str) -> str:
    """A store DSN the way an operator types it on the command line."""
    return "postgresql://" + dsn.split("://", 1)[1]


@pytest.fixture
async def pg_pair() -> AsyncIterator[tuple[str, str]]:
    """Two fresh PostgreSQL schemas (store DSNs), dropped afterwards."""
    admin = server_dsn()
    async for first in temporary_schema(admin):
        async for second in temporary_schema(admin):
            yield store_dsn(admin, first), store_dsn(admin, second)


async def filled(db: Any) -> dict[str, Any]:
    async with db:
        await fill_every_kind(db)
        return await snapshot(db)


async def read_back(db: Any) -> tuple[dict[str, Any], dict[str, int]]:
    async with db:
        return await snapshot(db), await raw_counts(db)


def assert_identical(before: dict[str, Any], after: dict[str, Any]) -> None:
    for table, rows in before["tables"].items():
        assert_same(rows, after["tables"][table], table)
    assert_same(before["reads"], after["reads"], "reads")
    assert_same(before["search"], after["search"], "search")


async def test_sqlite_to_postgres_and_back_loses_nothing(tmp_path: Path, pg_dsn: str) -> None:
    source = tmp_path / "source.db"
    before = await filled(SessionDB(source))
    up = run_json(tmp_path, "--db", str(source), "copy", "--to", as_url(pg_dsn))
    assert up["verified"] is True and up["mismatch_count"] == 0 and up["conflicts"] == []
    assert up["inserted"] == {**{t: n for t, n in ROW_COUNTS.items()}}
    on_postgres, counts = await read_back(PostgresSessionDB(pg_dsn))
    assert counts == ROW_COUNTS
    assert_identical(before, on_postgres)
    back = tmp_path / "back.db"
    down = run_json(tmp_path, "--db", str(back), "copy", "--from", as_url(pg_dsn))
    assert down["verified"] is True and down["imported"] == ROW_COUNTS["sessions"]
    returned, counts = await read_back(SessionDB(back))
    assert counts == ROW_COUNTS
    assert_identical(before, returned)
    assert run_cli(tmp_path, "verify", str(source), str(back)).returncode == 0


async def test_postgres_to_sqlite_loses_nothing(tmp_path: Path, pg_dsn: str) -> None:
    before = await filled(PostgresSessionDB(pg_dsn))
    target = tmp_path / "target.db"
    down = run_json(tmp_path, "--db", str(target), "copy", "--from", as_url(pg_dsn))
    assert down["verified"] is True and down["inserted"] == ROW_COUNTS
    after, counts = await read_back(SessionDB(target))
    assert counts == ROW_COUNTS
    assert_identical(before, after)


async def test_export_import_on_sqlite_loses_nothing(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    before = await filled(SessionDB(source))
    out = tmp_path / "all.jsonl"
    assert run_cli(tmp_path, "--db", str(source), "export", "-o", str(out)).returncode == 0
    assert json.loads(out.read_text().splitlines()[-1]) == {"end": {"rows": ROW_COUNTS}}
    target = tmp_path / "target.db"
    report = run_json(tmp_path, "--db", str(target), "import", str(out))
    assert report["inserted"] == ROW_COUNTS and report["conflicts"] == []
    after, counts = await read_back(SessionDB(target))
    assert counts == ROW_COUNTS
    assert_identical(before, after)
    assert run_cli(tmp_path, "verify", str(source), str(target)).returncode == 0


async def test_export_import_on_postgres_loses_nothing(tmp_path: Path, pg_pair: tuple[str, str]) -> None:
    source, target = pg_pair
    before = await filled(PostgresSessionDB(source))
    out = tmp_path / "all.jsonl"
    assert run_cli(tmp_path, "--db", as_url(source), "export", "-o", str(out)).returncode == 0
    assert json.loads(out.read_text().splitlines()[0])["backend"] == "postgres"
    report = run_json(tmp_path, "--db", as_url(target), "import", str(out))
    assert report["inserted"] == ROW_COUNTS
    after, counts = await read_back(PostgresSessionDB(target))
    assert counts == ROW_COUNTS
    assert_identical(before, after)
    assert run_cli(tmp_path, "verify", as_url(source), as_url(target)).returncode == 0


async def test_a_copy_leaves_other_sessions_alone_and_verify_finds_planted_differences(tmp_path: Path, pg_dsn: str) -> None:
    source = tmp_path / "source.db"
    await filled(SessionDB(source))
    async with PostgresSessionDB(pg_dsn) as db:  # the target already holds a conversation of its own
        await db.create_session("mine", "cli", system_prompt="be brief")
        await db.append_message("mine", "user", "my own words")
        await db.set_session_title("mine", "Mine")
        await db.set_meta("theme", "light")  # the source says "dark": a conflict, left as it is
        mine = (await db.dump_rows("sessions"), await db.dump_messages("mine"))
    done = run_cli(tmp_path, "--db", str(source), "copy", "--to", as_url(pg_dsn), "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 4  # the conflicting meta key makes the stores differ
    assert report["conflicts"] == [{"table": "state_meta", "key": ["theme"],
                                    "problem": "the target holds this row with other values (value)"}]
    assert [(m["table"], m["key"]) for m in report["mismatches"]] == [("state_meta", ["theme"])]
    assert report["only_in_target"] == {"sessions": 1}  # counted, not a difference
    async with PostgresSessionDB(pg_dsn) as db:
        assert (await db.find_rows("sessions", ["mine"]), await db.dump_messages("mine")) == mine
        assert await db.get_meta("theme") == "light"
        await db.set_meta("theme", "dark")
    assert run_cli(tmp_path, "--db", str(source), "copy", "--to", as_url(pg_dsn)).returncode == 0

    async with PostgresSessionDB(pg_dsn) as db:  # plant one difference per kind of row
        await raw_exec(db, "UPDATE messages SET active = 1 WHERE session_id = 'compacted' AND id = "
                           "(SELECT min(id) FROM messages WHERE session_id = 'compacted')")
        await raw_exec(db, "UPDATE session_model_usage SET estimated_cost_usd = estimated_cost_usd + 1e-9 WHERE task = 'title'")
        await raw_exec(db, "UPDATE sessions SET rewind_count = 0 WHERE id = 'rewound'")
        await raw_exec(db, "DELETE FROM async_delegations WHERE delegation_id = 'del-2'")
    done = run_cli(tmp_path, "verify", str(source), as_url(pg_dsn), "--json")
    assert done.returncode == 4
    found = {(m["table"], m.get("session_id"), m.get("row", "")[:10]): m["problem"] for m in json.loads(done.stdout)["mismatches"]}
    assert found.pop(("messages", "compacted", "message #1")) == "active differ"
    assert found.pop(("session_model_usage", "compacted", "")).startswith("estimated_cost_usd differ")
    assert found.pop(("sessions", "rewound", "")).startswith("rewind_count differ (rewind_count: source 1, target 0)")
    assert found.pop(("async_delegations", None, "")) == "missing from the target"
    assert found.pop(("sessions", "mine", "")) == "only in the target"  # verify is strict unless --allow-extra
    assert found == {}
    human = run_cli(tmp_path, "verify", str(source), as_url(pg_dsn), "--allow-extra")
    assert human.returncode == 4 and "MISMATCH messages session_id=compacted row=message #1" in human.stdout
    assert "verification failed: 4 difference(s)" in human.stdout and "1 row(s) the source does not" in human.stdout
