"""The hermes-state command through subprocesses on real SQLite files: output, --json, exit codes, errors."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from hermes_state import SessionDB

from .cli_support import build_store, one_error_line, run_cli, run_json


@pytest.fixture
async def built(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "state.db"
    await build_store(path)
    return path


def sidecars(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


# --------------------------------------------------------------- global options


def test_version_help_and_usage_errors(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--version")
    assert done.returncode == 0 and done.stdout.startswith("hermes-state 0.")
    done = run_cli(tmp_path, "--help")
    assert done.returncode == 0
    for code in ("0  success", "2  usage", "3  not found", "4  the two stores differ"):
        assert code in done.stdout
    assert "``" not in done.stdout and ":meth:" not in done.stdout
    for command in ("info", "sessions", "search", "export", "import", "doctor", "copy", "quickstart"):
        assert command in done.stdout
    sub_help = run_cli(tmp_path, "sessions", "list", "--help")
    assert sub_help.returncode == 0 and "--since" in sub_help.stdout and "exit codes" in sub_help.stdout
    assert run_cli(tmp_path, "no-such-command").returncode == 2
    assert run_cli(tmp_path, "sessions", "list", "--limit", "-1").returncode == 2
    assert run_cli(tmp_path, "sessions", "list", "--since", "yesterday-ish").returncode == 2


def test_global_options_before_or_after_the_command(built: Path) -> None:
    before = run_cli(built.parent, "--db", str(built), "--json", "info")
    after = run_cli(built.parent, "info", "--db", str(built), "--json")
    mixed = run_cli(built.parent, "--json", "info", "--db", str(built))
    assert before.returncode == after.returncode == mixed.returncode == 0, (before.stderr, after.stderr)
    first, second, third = (json.loads(d.stdout) for d in (before, after, mixed))
    assert first["path"] == second["path"] == third["path"] == str(built)
    assert first["sessions"] == second["sessions"] == 5


# ------------------------------------------------------------------- info


def test_info_human_and_json_leave_no_sidecars(built: Path) -> None:
    assert sidecars(built) == []
    info = run_json(built.parent, "--db", str(built), "info")
    assert info["backend"] == "sqlite" and info["schema_version"] == 25
    file_mode = "wal" if built.read_bytes()[18] == 2 else "delete"  # what the file header records
    assert info["journal_mode"] == file_mode and info["sessions"] == 5 and info["messages"] == 9
    assert info["file_bytes"] == built.stat().st_size and info["wal_bytes"] == 0
    assert info["fts"] == "current" and info["fts_rebuild"] is None
    assert info["writer"]["commands_applied"] == 0 and info["writer"]["batches_applied"] == 0
    human = run_cli(built.parent, "--db", str(built), "info")
    assert human.returncode == 0
    assert "5 sessions, 9 messages" in human.stdout and f"journal mode {file_mode}" in human.stdout
    assert sidecars(built) == []  # read-only commands create no -wal/-shm files


def test_default_database_is_in_hermes_home(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "info")
    assert done.returncode == 3
    assert str(tmp_path / "state.db") in one_error_line(done)
    assert not (tmp_path / "state.db").exists()


def make_read_only(paths: list[Path]) -> bool:
    """Take write permission away, also from root (immutable attribute); False when that is impossible here."""
    if os.geteuid() != 0:
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        return True
    import subprocess

    done = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True)
    return done.returncode == 0


def restore_writable(paths: list[Path]) -> None:
    if os.geteuid() == 0:
        import subprocess

        subprocess.run(["chattr", "-i", *map(str, paths)], capture_output=True)
    for path in paths:
        path.chmod(0o755 if path.is_dir() else 0o644)


def test_read_commands_need_no_write_permission(built: Path) -> None:
    locked = [built, built.parent]
    if not make_read_only(locked):
        pytest.skip("cannot make a directory read-only for root here (no chattr +i)")
    try:
        for args in (["info"], ["sessions", "list"], ["search", "docker"], ["doctor"], ["sessions", "show", "deploy-1"],
                     ["export"]):
            done = run_cli(built.parent.parent, "--db", str(built), *args)
            assert done.returncode == 0, (args, done.stderr)
        assert sidecars(built) == []
        refused = run_cli(built.parent.parent, "--db", str(built), "sessions", "delete", "deploy-1")
        assert refused.returncode == 1 and "not writable" in one_error_line(refused)
    finally:
        restore_writable(locked)


async def test_read_commands_beside_a_live_writer_see_its_commits(built: Path) -> None:
    db = SessionDB(built)  # holds the file open in WAL mode: -wal/-shm exist, so the read is not immutable
    try:
        await db.create_session("live-9", source="cli")
        await db.append_message("live-9", "user", "written while the command reads")
        listed = run_json(built.parent, "--db", str(built), "sessions", "list", "--limit", "50")
        assert "live-9" in [row["id"] for row in listed]
    finally:
        await db.close()


# ----------------------------------------------------------------- sessions


def test_sessions_list_filters_and_order(built: Path) -> None:
    db = ["--db", str(built)]
    rows = run_json(built.parent, *db, "sessions", "list")
    ids = [row["id"] for row in rows]
    assert set(ids) == {"deploy-1", "chat-2", "pin-5"}  # archived hidden, child listed under its root
    actives = [row["last_active"] for row in rows]
    assert actives == sorted(actives, reverse=True)
    assert [r["id"] for r in run_json(built.parent, *db, "sessions", "list", "--source", "telegram")] == ["chat-2"]
    assert [r["id"] for r in run_json(built.parent, *db, "sessions", "list", "--archived")] == ["old-4"]
    assert "old-4" in [r["id"] for r in run_json(built.parent, *db, "sessions", "list", "--all")]
    assert [r["id"] for r in run_json(built.parent, *db, "sessions", "list", "--pinned")] == ["pin-5"]
    assert [r["id"] for r in run_json(built.parent, *db, "sessions", "list", "--match", "compose OUT")] == ["deploy-1"]
    assert run_json(built.parent, *db, "sessions", "list", "--since", "1h")
    future = time.strftime("%Y-%m-%d", time.localtime(time.time() + 3 * 86400))
    assert run_json(built.parent, *db, "sessions", "list", "--since", future) == []
    page = run_json(built.parent, *db, "sessions", "list", "--limit", "1", "--offset", "1")
    assert [r["id"] for r in page] == [ids[1]]
    human = run_cli(built.parent, *db, "sessions", "list", "--all")
    assert human.returncode == 0
    assert "Compose outage" in human.stdout and "A-" in human.stdout and "-P" in human.stdout


def test_sessions_show_renders_a_transcript(built: Path) -> None:
    done = run_cli(built.parent, "--db", str(built), "sessions", "show", "deploy")  # a unique prefix
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "session deploy-1" in out and "title: Compose outage" in out
    assert 'terminal(command="docker compose logs", tail=50)  (call call_7)' in out
    assert "tool terminal (call call_7)" in out and "volume 'data' not found" in out
    assert "tokens: 1500 in, 420 out" in out and "3 API calls" in out
    assert time.strftime("%Y-%m-%d") in out  # timestamps rendered as dates
    picture = run_cli(built.parent, "--db", str(built), "sessions", "show", "chat-2").stdout
    assert "what is in this picture" in picture and "[image_url]" in picture
    shown = run_json(built.parent, "--db", str(built), "sessions", "show", "deploy-1")
    assert shown["session"]["id"] == "deploy-1" and [m["role"] for m in shown["messages"]] == [
        "user", "assistant", "tool", "assistant"]
    missing = run_cli(built.parent, "--db", str(built), "sessions", "show", "nope")
    assert missing.returncode == 3 and "nope" in one_error_line(missing)


def test_sessions_delete_and_not_found(built: Path) -> None:
    db = ["--db", str(built)]
    done = run_cli(built.parent, *db, "sessions", "delete", "chat-2")
    assert done.returncode == 0 and "deleted chat-2" in done.stdout
    again = run_cli(built.parent, *db, "sessions", "delete", "chat-2", "pin-5", "--json")
    assert again.returncode == 3
    assert json.loads(again.stdout) == {"deleted": ["pin-5"], "not_found": ["chat-2"]}
    assert run_json(built.parent, *db, "info")["sessions"] == 3


async def test_sessions_prune_dry_run_then_delete(built: Path) -> None:
    db = SessionDB(built)
    try:
        await db.create_session("stale-6", source="cli")
        await db.append_message("stale-6", "user", "old news")
        await db.end_session("stale-6", "done")
    finally:
        await db.close()
    conn = sqlite3.connect(built)  # age two ended sessions as an old file would have them
    old = time.time() - 40 * 86400
    conn.execute("UPDATE messages SET timestamp = ? WHERE session_id IN ('stale-6', 'deploy-1')", (old,))
    conn.execute("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id IN ('stale-6', 'deploy-1')", (old, old))
    conn.commit()
    conn.close()
    args = ["--db", str(built), "sessions", "prune", "--older-than", "30"]
    dry = run_json(built.parent, *args, "--dry-run")
    assert sorted(r["id"] for r in dry["candidates"]) == ["deploy-1", "stale-6"] and dry["deleted"] == 0
    assert run_json(built.parent, "--db", str(built), "info")["sessions"] == 6
    done = run_cli(built.parent, *args)
    assert done.returncode == 0 and "deleted 2 session(s)" in done.stdout
    left = run_json(built.parent, "--db", str(built), "sessions", "list", "--all")
    assert "deploy-1" not in [r["id"] for r in left] and "chat-2" in [r["id"] for r in left]
    assert run_cli(built.parent, *args[:-1], "-3").returncode == 2


# ------------------------------------------------------------------- search


def test_search_hits_snippets_and_filters(built: Path) -> None:
    db = ["--db", str(built)]
    hits = run_json(built.parent, *db, "search", "docker")
    assert {h["session_id"] for h in hits} == {"deploy-1"}
    assert any(">>>docker<<<" in h["snippet"] for h in hits)
    only_users = run_json(built.parent, *db, "search", "docker", "--role", "user")
    assert [h["role"] for h in only_users] == ["user"]
    assert run_json(built.parent, *db, "search", "docker", "--source", "telegram") == []
    human = run_cli(built.parent, *db, "search", "volume")
    assert human.returncode == 0 and "deploy-1" in human.stdout and ">>>volume<<<" in human.stdout
    none = run_cli(built.parent, *db, "search", "zebra")
    assert none.returncode == 0 and "no matches" in none.stdout


# ----------------------------------------------------------- export / import


def test_export_import_round_trip(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    done = run_cli(tmp_path, "--db", str(built), "export", "-o", str(out))
    assert done.returncode == 0 and "exported 5 session(s), 9 message(s)" in done.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    header, rows, end = lines[0], lines[1:-1], lines[-1]
    assert header["format"] == "hermes-state-export" and header["format_version"] == 2
    assert header["schema_version"] == 25 and header["backend"] == "sqlite" and header["scope"] == "store"
    assert end == {"end": {"rows": {"system_prompts": 1, "sessions": 5, "messages": 9, "session_model_usage": 1}}}
    order = [r["row"]["id"] for r in rows if r["table"] == "sessions"]
    assert order.index("deploy-1") < order.index("child-3")  # parents first
    copy = tmp_path / "copy" / "state.db"
    imported = run_json(tmp_path, "--db", str(copy), "import", str(out))
    assert imported["imported"] == 5 and imported["inserted"]["messages"] == 9 and imported["conflicts"] == []
    again = run_json(tmp_path, "--db", str(copy), "import", str(out))
    assert again["imported"] == 0 and again["skipped"] == 5 and again["inserted"] == {}  # a re-run never duplicates
    assert run_cli(tmp_path, "verify", str(built), str(copy)).returncode == 0  # every row, every column
    restored = run_json(tmp_path, "--db", str(copy), "sessions", "show", "deploy-1")
    assert restored["session"]["title"] == "Compose outage" and restored["session"]["input_tokens"] == 1500
    child = run_json(tmp_path, "--db", str(copy), "sessions", "show", "child-3")
    assert child["session"]["parent_session_id"] == "deploy-1"
    picture = run_json(tmp_path, "--db", str(copy), "sessions", "show", "chat-2")["messages"][0]["content"]
    assert picture[1]["type"] == "image_url"  # multimodal content keeps its type


def test_export_selected_to_stdout_and_import_from_stdin(built: Path, tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--db", str(built), "export", "chat-2", "deploy-1")
    assert done.returncode == 0
    rows = [json.loads(line) for line in done.stdout.splitlines()[1:-1]]
    assert sorted(r["row"]["id"] for r in rows if r["table"] == "sessions") == ["chat-2", "deploy-1"]
    assert [r["row"]["hash"] for r in rows if r["table"] == "system_prompts"]  # deploy-1's prompt travels with it
    assert json.loads(done.stdout.splitlines()[0])["scope"] == "sessions"
    both = run_cli(tmp_path, "--db", str(built), "export", "chat-2", "--source", "cli")
    assert both.returncode == 2 and "not both" in one_error_line(both)
    by_source = run_cli(tmp_path, "--db", str(built), "export", "--source", "telegram")
    assert [json.loads(line)["row"]["id"] for line in by_source.stdout.splitlines()
            if json.loads(line).get("table") == "sessions"] == ["chat-2"]
    missing = run_cli(tmp_path, "--db", str(built), "export", "chat-2", "ghost")
    assert missing.returncode == 3 and "ghost" in missing.stderr
    target = tmp_path / "piped.db"
    piped = run_cli(tmp_path, "--db", str(target), "import", "-", "--json", stdin=done.stdout.encode())
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["imported"] == 2


async def test_import_resumes_a_cut_session_and_leaves_a_conflicting_one_alone(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    assert run_cli(tmp_path, "--db", str(built), "export", "-o", str(out)).returncode == 0
    target = tmp_path / "t.db"
    async with SessionDB(built, read_only=True) as source, SessionDB(target) as db:
        # What an interrupted import leaves: deploy-1's row (counters at zero) and its first 2 of 4 messages, counted.
        await db.restore_rows("system_prompts", await source.dump_rows("system_prompts"))
        (deploy,) = await source.find_rows("sessions", ["deploy-1"])
        await db.restore_rows("sessions", [{**deploy, "message_count": 0, "tool_call_count": 0}])
        await db.restore_messages("deploy-1", (await source.dump_messages("deploy-1"))[:2], start=0)
        (cut,) = await db.find_rows("sessions", ["deploy-1"])
        assert (cut["message_count"], cut["tool_call_count"]) == (2, 1)  # what it holds: a question and a tool call
        # And a session of the target's own that happens to share an id with the file.
        await db.create_session("chat-2", "mine")
        await db.append_message("chat-2", "user", "not from the file")
    done = run_cli(tmp_path, "--db", str(target), "import", str(out), "--json")
    assert done.returncode == 4, done.stderr
    report = json.loads(done.stdout)
    assert report["imported"] == 3 and report["skipped"] == 1 and report["inserted"]["messages"] == 2 + 1 + 1 + 1
    assert [(c["table"], c["key"]) for c in report["conflicts"]] == [("sessions", ["chat-2"])]
    mine = run_json(tmp_path, "--db", str(target), "sessions", "show", "chat-2")
    assert mine["session"]["source"] == "mine" and [m["content"] for m in mine["messages"]] == ["not from the file"]
    deploy = run_json(tmp_path, "--db", str(target), "sessions", "show", "deploy-1")["messages"]
    original = run_json(tmp_path, "--db", str(built), "sessions", "show", "deploy-1")["messages"]
    assert [m["content"] for m in deploy] == [m["content"] for m in original]  # completed, nothing twice
    async with SessionDB(target, read_only=True) as db:
        (done_row,) = await db.find_rows("sessions", ["deploy-1"])
    assert (done_row["message_count"], done_row["tool_call_count"]) == (4, 1)  # the source's counters
    again = run_cli(tmp_path, "--db", str(target), "import", str(out), "--json")
    assert again.returncode == 4 and json.loads(again.stdout)["inserted"] == {}


def test_an_export_of_the_previous_format_still_imports(built: Path, tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "export-v1.jsonl"  # written by the release before format 2
    target = tmp_path / "v1.db"
    report = run_json(tmp_path, "--db", str(target), "import", str(fixture))
    assert report["imported"] == 5 and report["errors"] == []
    for session_id in ("deploy-1", "chat-2", "child-3", "old-4", "pin-5"):
        old = run_json(tmp_path, "--db", str(built), "sessions", "show", session_id)
        new = run_json(tmp_path, "--db", str(target), "sessions", "show", session_id)
        keys = ("role", "content", "tool_calls", "tool_call_id", "tool_name")
        assert [{k: m[k] for k in keys} for m in new["messages"]] == [{k: m[k] for k in keys} for m in old["messages"]]
    assert run_json(tmp_path, "--db", str(target), "sessions", "show", "child-3")["session"]["parent_session_id"] == "deploy-1"


def test_an_unknown_newer_or_cut_export_is_refused(built: Path, tmp_path: Path) -> None:
    lines = run_cli(tmp_path, "--db", str(built), "export").stdout.splitlines()
    header = json.loads(lines[0])
    newer = tmp_path / "newer.jsonl"
    newer.write_text("\n".join([json.dumps({**header, "format_version": 3, "schema_version": 31}), *lines[1:]]) + "\n")
    target = tmp_path / "t.db"
    done = run_cli(tmp_path, "--db", str(target), "import", str(newer))
    assert done.returncode == 1
    assert "format version 3 (schema version 31)" in one_error_line(done) and "upgrade hermes-state" in done.stderr
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:-3]) + "\n")
    done = run_cli(tmp_path, "--db", str(target), "import", str(cut))
    assert done.returncode == 1 and "no end line" in one_error_line(done)
    assert not target.exists()  # refused before the store was opened


async def test_import_reads_the_json_the_api_exports(built: Path, tmp_path: Path) -> None:
    db = SessionDB(built, read_only=True)
    try:
        everything = await db.export_all()
        one = await db.export_session("deploy-1")
    finally:
        await db.close()
    listing = tmp_path / "export_all.json"
    listing.write_text(json.dumps(everything, indent=2))
    single = tmp_path / "one.json"
    single.write_text(json.dumps(one, indent=2))  # one object over many lines
    target = tmp_path / "from-json.db"
    assert run_json(tmp_path, "--db", str(target), "import", str(listing))["imported"] == 5
    other = tmp_path / "from-one.db"
    assert run_json(tmp_path, "--db", str(other), "import", str(single))["imported"] == 1
    child = run_json(tmp_path, "--db", str(target), "sessions", "show", "child-3")
    assert child["session"]["parent_session_id"] == "deploy-1"  # the list was newest first, parents linked anyway


def test_import_validates_everything_before_writing(built: Path, tmp_path: Path) -> None:
    good = run_cli(tmp_path, "--db", str(built), "export").stdout.splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*good[:3], '{"id": "x", "messages": "nope"}', "{not json", *good[3:]]) + "\n")
    target = tmp_path / "t.db"
    done = run_cli(tmp_path, "--db", str(target), "import", str(bad))
    assert done.returncode == 1
    line = one_error_line(done)
    assert "line 4" in line and "line 5" in line and "nothing imported" in line
    assert not target.exists()  # validation failed before the store was even opened
    refused = tmp_path / "refused.jsonl"
    refused.write_text('{"id": "a", "messages": [{"role": "user", "content": "hi", "timestamp": "soon"}]}\n')
    done = run_cli(tmp_path, "--db", str(target), "import", str(refused))
    assert done.returncode == 1 and "line 1" in one_error_line(done) and "timestamp" in done.stderr
    assert run_json(tmp_path, "--db", str(target), "info")["sessions"] == 0
    missing = run_cli(tmp_path, "--db", str(target), "import", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 3


def test_import_of_a_session_larger_than_a_batch(tmp_path: Path) -> None:
    session = {"id": "big", "source": "cli",
               "messages": [{"role": "user", "content": f"line {i}", "timestamp": 1000.0 + i} for i in range(250)]}
    source = tmp_path / "big.jsonl"
    source.write_text(json.dumps(session) + "\n")
    target = tmp_path / "big.db"
    report = run_json(tmp_path, "--db", str(target), "import", str(source), "--batch-messages", "100")
    assert report["imported"] == 1 and report["appended_messages"] == 150
    again = run_json(tmp_path, "--db", str(target), "import", str(source), "--batch-messages", "100")
    assert again["skipped"] == 1 and again["appended_messages"] == 0
    shown = run_json(tmp_path, "--db", str(target), "sessions", "show", "big")
    assert [m["content"] for m in shown["messages"]] == [f"line {i}" for i in range(250)]
    assert [m["timestamp"] for m in shown["messages"]] == [1000.0 + i for i in range(250)]
    assert shown["session"]["message_count"] == 250


# ------------------------------------------------------------------- doctor


def test_doctor_reports_health(built: Path) -> None:
    report = run_json(built.parent, "--db", str(built), "doctor")
    assert report["ok"] is True
    assert [c["check"] for c in report["checks"]] == ["schema", "integrity", "fts", "wal", "permissions", "leases"]
    assert all(c["status"] == "ok" for c in report["checks"])
    assert sidecars(built) == []


async def test_doctor_lists_live_leases(built: Path) -> None:
    db = SessionDB(built)
    try:
        assert await db.try_acquire_compression_lock("deploy-1", "pid=1:task=compress", ttl_seconds=300)
        report = run_json(built.parent, "--db", str(built), "doctor")
    finally:
        await db.close()
    leases = next(c for c in report["checks"] if c["check"] == "leases")
    assert leases["detail"].startswith("1 live") and "pid=1:task=compress" in leases["detail"]


async def test_doctor_repair_removes_expired_leases_without_a_backup(built: Path) -> None:
    db = SessionDB(built)
    try:
        assert await db.try_acquire_compression_lock("deploy-1", "pid=1:task=compress", ttl_seconds=300)
        now = time.time()
        conn = sqlite3.connect(built)
        conn.execute("INSERT INTO compression_locks VALUES ('chat-2', 'crashed-worker', ?, ?)", (now - 900, now - 600))
        conn.commit()
        conn.close()
        sick = run_json(built.parent, "--db", str(built), "doctor")
        leases = next(c for c in sick["checks"] if c["check"] == "leases")
        assert sick["ok"] is True and leases["status"] == "warn" and "compression chat-2 of crashed-worker" in leases["detail"]
        done = run_cli(built.parent, "--db", str(built), "doctor", "--repair")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "repair: 1 step(s); integrity now: ok" in done.stdout
        assert "  - removed 1 expired compression lease(s): chat-2 of crashed-worker" in done.stdout
        assert [(lease["key"], lease["live"]) for lease in await db.leases()] == [("deploy-1", True)]
    finally:
        await db.close()
    assert not [p for p in built.parent.iterdir() if "backup" in p.name]  # nothing failed: no file repair


def test_doctor_repair_never_turns_a_foreign_database_into_a_store(tmp_path: Path) -> None:
    path = tmp_path / "other-app.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    done = run_cli(tmp_path, "--db", str(path), "doctor", "--repair")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "it does not open as a store: nothing in it was changed" in done.stdout
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]  # no schema created
    conn.close()


def damage_an_index(path: Path) -> None:
    """Make an index disagree with its table (integrity_check reports it on every SQLite version)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE INDEX idx_messages_session ON messages(role, timestamp)' "
        "WHERE name = 'idx_messages_session'"
    )
    conn.commit()
    conn.close()


def test_doctor_repair_fixes_a_damaged_index_with_a_backup(built: Path) -> None:
    damage_an_index(built)
    sick = run_cli(built.parent, "--db", str(built), "doctor")
    assert sick.returncode == 1 and "FAIL  integrity" in sick.stdout, sick.stdout + sick.stderr
    repaired = run_cli(built.parent, "--db", str(built), "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repair: backup at" in repaired.stdout and "reindex" in repaired.stdout
    backup = repaired.stdout.split("backup at ", 1)[1].split(";", 1)[0]
    assert Path(backup).exists()
    assert run_json(built.parent, "--db", str(built), "doctor")["ok"] is True
    assert len(run_json(built.parent, "--db", str(built), "search", "docker")) == 2
    assert run_json(built.parent, "--db", str(built), "info")["messages"] == 9  # no transcript row lost


def test_doctor_repair_on_a_healthy_file_does_nothing(built: Path) -> None:
    before = sorted(p.name for p in built.parent.iterdir())
    done = run_cli(built.parent, "--db", str(built), "doctor", "--repair")
    assert done.returncode == 0 and "nothing to repair" in done.stdout
    assert sorted(p.name for p in built.parent.iterdir()) == before


async def test_doctor_repair_stops_after_three_failures_and_says_what_to_do(tmp_path: Path) -> None:
    from .test_repair_ledger import cut_short, make_store

    path = tmp_path / "cut.db"
    await make_store(path)
    cut_short(path)
    for _ in range(3):
        failed = run_cli(tmp_path, "--db", str(path), "doctor", "--repair")
        assert failed.returncode == 1 and "salvage failed" in failed.stdout, failed.stdout + failed.stderr
    refused = run_cli(tmp_path, "--db", str(path), "doctor", "--repair")
    assert refused.returncode == 1
    assert "repair refused:" in refused.stdout and "manual recovery is required" in refused.stdout
    assert f'sqlite3 {path} ".recover"' in refused.stdout and f"{path}.repair-attempts.json" in refused.stdout


# -------------------------------------------------------------- quickstart


def test_quickstart_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "qs.db"
    first = run_cli(tmp_path, "--db", str(path), "quickstart")
    assert first.returncode == 0, first.stderr
    assert 'calls terminal(command="docker compose logs")' in first.stdout
    assert f"--db {path} sessions delete quickstart-demo-1 quickstart-demo-2" in first.stdout
    second = run_cli(tmp_path, "--db", str(path), "quickstart")
    assert second.returncode == 0
    info = run_json(tmp_path, "--db", str(path), "info")
    assert info["sessions"] == 2 and info["messages"] == 6
    rows = run_json(tmp_path, "--db", str(path), "sessions", "list")
    assert {r["id"] for r in rows} == {"quickstart-demo-1", "quickstart-demo-2"}
    assert all(r["ended_at"] is not None for r in rows)
    removal = first.stdout.rsplit("remove the demo sessions with: ", 1)[1].strip().split()
    done = run_cli(tmp_path, *removal[3:])
    assert done.returncode == 0
    assert run_json(tmp_path, "--db", str(path), "info")["sessions"] == 0


# -------------------------------------------------------------------- errors


def test_a_directory_as_the_database(tmp_path: Path) -> None:
    for args in (["info"], ["quickstart"], ["import", "-"]):
        done = run_cli(tmp_path, "--db", str(tmp_path), *args, stdin=b"")
        assert done.returncode == 1
        assert one_error_line(done) == f"hermes-state: {tmp_path} is a directory, not a database file"


def test_a_missing_file_is_never_created_by_a_read_command(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    for args in (["info"], ["sessions", "list"], ["sessions", "show", "x"], ["search", "x"], ["export"], ["doctor"]):
        done = run_cli(tmp_path, "--db", str(path), *args)
        assert done.returncode == 3, (args, done.stderr)
        assert "no database at" in one_error_line(done)
        assert not path.exists()


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n" * 50)
    for args in (["info"], ["quickstart"], ["search", "x"]):
        done = run_cli(tmp_path, "--db", str(path), *args)
        assert done.returncode == 1
        assert one_error_line(done) == f"hermes-state: {path} is not a SQLite database"
    assert path.read_text() == "just some notes\n" * 50


def test_an_unwritable_place_for_a_new_database(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    done = run_cli(tmp_path, "--db", str(blocker / "sub" / "state.db"), "quickstart")
    assert done.returncode == 1
    assert "not writable" in one_error_line(done) and "cannot be created" in done.stderr
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        done = run_cli(tmp_path, "--db", str(locked / "state.db"), "quickstart")
        assert done.returncode == 1 and "not writable" in one_error_line(done)
    elif not os.access("/proc/sys", os.W_OK):  # root: a read-only file system is the unwritable directory
        done = run_cli(tmp_path, "--db", "/proc/sys/hermes-state.db", "quickstart")
        assert done.returncode == 1 and "not writable" in one_error_line(done)


def test_passwords_in_urls_are_never_printed(tmp_path: Path) -> None:
    secret = "s3cr3t-pw"
    for url in (f"postgresql+asyncpg://alice:{secret}@127.0.0.1:1/db", f"postgresql://alice:{secret}@127.0.0.1:1/db",
                f"postgres://alice:{secret}@127.0.0.1:1/db?sslmode=disable&password={secret}"):
        for args in (["info"], ["quickstart"], ["copy", "--to", url]):
            done = run_cli(tmp_path, "--db", url if args[0] != "copy" else str(tmp_path / "x.db"), *args)
            assert done.returncode != 0
            assert secret not in done.stdout + done.stderr
            assert "alice:***@" in done.stderr or "127.0.0.1:1" in done.stderr or "x.db" in done.stderr
    bad_scheme = run_cli(tmp_path, "--db", f"mysql://bob:{secret}@host/db", "info")
    assert bad_scheme.returncode == 1 and secret not in bad_scheme.stderr


# ------------------------------------------------------------ library errors


async def test_library_names_a_directory_given_as_the_database(tmp_path: Path) -> None:
    for read_only in (False, True):
        db = SessionDB(tmp_path, read_only=read_only)
        with pytest.raises(sqlite3.OperationalError, match="is a directory"):
            await db.get_session("x")
        await db.close()


async def test_library_parent_that_cannot_be_created_is_a_not_writable_error(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    db = SessionDB(blocker / "nested" / "state.db")
    with pytest.raises(sqlite3.OperationalError, match="state.db is not writable: directory .* cannot be created"):
        await db.create_session("s", source="cli")
    await db.close()


# ----------------------------------------------------------------- progress


def test_progress_bar_only_on_a_terminal(built: Path, tmp_path: Path) -> None:
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from .cli_support import cli_env

    master, replica = pty.openpty()
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    command = [sys.executable, "-m", "hermes_state", "--db", str(built), "export", "-o", str(tmp_path / "tty.jsonl")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=replica, env=cli_env(tmp_path))
    os.close(replica)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        assert process.wait(timeout=120) == 0
    assert b"export:" in seen and b"/5 [" in seen  # tqdm drew the bar on the terminal
    piped = run_cli(tmp_path, "--db", str(built), "export", "-o", str(tmp_path / "pipe.jsonl"))
    assert piped.returncode == 0 and piped.stderr == ""  # no bar when stderr is not a terminal


async def test_a_damaged_file_names_the_repair_and_doctor_repairs_it(tmp_path: Path) -> None:
    from .test_damaged_files import ROWS, make_file, marker, page_of, smash_page

    path = tmp_path / "damaged.db"
    await make_file(path)
    smash_page(path, page_of(path, marker(200)))
    read = run_cli(tmp_path, "--db", str(path), "sessions", "show", "s")
    assert read.returncode == 1 and "doctor --repair" in one_error_line(read)
    sick = run_cli(tmp_path, "--db", str(path), "doctor", "--json")
    assert sick.returncode == 1 and json.loads(sick.stdout)["ok"] is False
    repaired = run_cli(tmp_path, "--db", str(path), "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "salvage" in repaired.stdout and "repair: backup at" in repaired.stdout
    assert run_json(tmp_path, "--db", str(path), "doctor")["ok"] is True
    left = run_json(tmp_path, "--db", str(path), "info")["messages"]
    assert ROWS - 40 < left <= ROWS  # one page of rows lost, not the table
