"""The command against the real PostgreSQL server (a fresh schema per test): copy both ways, resume, info, errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from hermes_state.postgres import SessionDB as PostgresSessionDB

from .cli_support import build_store, cli_env, fill_store, one_error_line, run_cli, run_json


@pytest.fixture
async def pg_url(pg_dsn: str) -> AsyncIterator[str]:
    """The test's schema as an operator types it: ``postgresql://`` (the command accepts both forms)."""
    yield "postgresql://" + pg_dsn.split("://", 1)[1]


async def test_info_on_postgres(tmp_path: Path, pg_dsn: str, pg_url: str) -> None:
    db = PostgresSessionDB(pg_dsn)
    try:
        await db.create_session("pg-1", source="cli")
        await db.append_message("pg-1", "user", "hello from postgres")
        await db.append_message("pg-1", "assistant", "hello back")
    finally:
        await db.close()
    info = run_json(tmp_path, "--db", pg_url, "info")
    assert info["backend"] == "postgres" and info["messages"] == 2
    assert info["schema_version"] == 25 and info["server_version"]
    doctor = run_json(tmp_path, "--db", pg_url, "doctor")
    assert doctor["ok"] is True and {c["check"]: c["status"] for c in doctor["checks"]}["schema"] == "ok"
    human = run_cli(tmp_path, "--db", pg_url, "info")
    assert human.returncode == 0 and "backend postgres" in human.stdout and "server_version" in human.stdout
    # Current upstream's URL form works too (the driver stays asyncpg).
    psycopg_url = "postgresql+psycopg://" + pg_dsn.split("://", 1)[1] + "&connect_timeout=5"
    assert run_json(tmp_path, "--db", psycopg_url, "info")["messages"] == 2


async def test_copy_sqlite_to_postgres_to_sqlite_verified(tmp_path: Path, pg_url: str) -> None:
    source = tmp_path / "a" / "state.db"
    await build_store(source)
    up = run_json(tmp_path, "--db", str(source), "copy", "--to", pg_url)
    assert up["imported"] == 5 and up["verified"] is True, up
    info = run_json(tmp_path, "--db", pg_url, "info")
    assert info["sessions"] == 5 and info["messages"] == 9
    shown = run_json(tmp_path, "--db", pg_url, "sessions", "show", "deploy-1")
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant"]
    back = tmp_path / "b" / "state.db"
    down = run_json(tmp_path, "--db", str(back), "copy", "--from", pg_url)
    assert down["imported"] == 5 and down["verified"] is True, down
    original = run_json(tmp_path, "--db", str(source), "sessions", "show", "deploy-1")
    returned = run_json(tmp_path, "--db", str(back), "sessions", "show", "deploy-1")
    keys = ("role", "content", "tool_calls", "tool_call_id", "tool_name", "timestamp")
    assert [{k: m[k] for k in keys} for m in original["messages"]] == [{k: m[k] for k in keys} for m in returned["messages"]]
    assert returned["session"]["parent_session_id"] is None
    child = run_json(tmp_path, "--db", str(back), "sessions", "show", "child-3")["session"]
    assert child["parent_session_id"] == "deploy-1"
    again = run_json(tmp_path, "--db", str(source), "copy", "--to", pg_url)
    assert again["imported"] == 0 and again["skipped"] == 5 and again["verified"] is True


async def test_an_interrupted_copy_to_postgres_resumes(tmp_path: Path, pg_url: str) -> None:
    source = tmp_path / "src.db"
    sessions = 150
    total = await fill_store(source, sessions, 6)
    args = ["--db", str(source), "copy", "--to", pg_url, "--batch-sessions", "2", "--batch-messages", "12"]
    process = subprocess.Popen([sys.executable, "-m", "hermes_state", *args], env=cli_env(tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = run_cli(tmp_path, "--db", pg_url, "info", "--json")
            if done.returncode == 0 and json.loads(done.stdout)["messages"] >= 200:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    before = run_json(tmp_path, "--db", pg_url, "info")
    assert 200 <= before["messages"] < total, "the copy was not interrupted part-way"
    report = run_json(tmp_path, *args)
    assert report["skipped"] == before["sessions"] and report["imported"] == sessions - before["sessions"]
    assert report["inserted"]["messages"] == total - before["messages"] and report["verified"] is True
    info = run_json(tmp_path, "--db", pg_url, "info")
    assert info["sessions"] == sessions and info["messages"] == total


def test_a_postgres_server_that_is_down(tmp_path: Path) -> None:
    secret = "pw-never-shown"
    url = f"postgresql://hermes:{secret}@127.0.0.1:1/state"
    for args in (["--db", url, "info"], ["--db", str(tmp_path / "x.db"), "copy", "--from", url]):
        done = run_cli(tmp_path, *args)
        assert done.returncode == 1
        line = one_error_line(done)
        assert "cannot connect to PostgreSQL at 127.0.0.1:1" in line
        assert secret not in done.stdout + done.stderr
