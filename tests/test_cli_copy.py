"""``copy`` between stores and bulk ``export``/``import``, through subprocesses on real files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB

from .cli_support import build_store, cli_env, fill_store, one_error_line, run_cli, run_json, run_measured

def count_rows(path: Path, table: str) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


async def test_copy_between_sqlite_files_with_verification(tmp_path: Path) -> None:
    source = tmp_path / "a" / "state.db"
    await build_store(source)
    destination = tmp_path / "b" / "state.db"
    done = run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination))
    assert done.returncode == 0, done.stderr
    assert "copied 5 session(s) and 9 message(s)" in done.stdout
    assert "verified 16 row(s) in 4 table(s)" in done.stdout  # 1 prompt, 5 sessions, 9 messages, 1 usage row
    back = tmp_path / "c" / "state.db"
    report = run_json(tmp_path, "--db", str(back), "copy", "--from", str(destination))
    assert report["imported"] == 5 and report["verified"] is True and report["mismatches"] == []
    assert run_json(tmp_path, "--db", str(back), "info")["messages"] == 9
    child = run_json(tmp_path, "--db", str(back), "sessions", "show", "child-3")["session"]
    assert child["parent_session_id"] == "deploy-1"
    again = run_json(tmp_path, "--db", str(source), "copy", "--to", str(destination))
    assert again["imported"] == 0 and again["skipped"] == 5 and again["inserted"] == {} and again["verified"] is True


async def test_copy_verification_fails_on_any_difference(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    await build_store(source)
    destination = tmp_path / "b.db"
    assert run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination)).returncode == 0
    conn = sqlite3.connect(destination)
    conn.execute("UPDATE messages SET content = 'tampered' WHERE session_id = 'chat-2' AND role = 'assistant'")
    conn.execute("DELETE FROM messages WHERE session_id = 'pin-5'")
    conn.execute("UPDATE session_model_usage SET input_tokens = input_tokens - 1")
    conn.commit()
    conn.close()
    assert run_cli(tmp_path, "--db", str(destination), "sessions", "delete", "old-4").returncode == 0
    done = run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--verify-only", "--json")
    assert done.returncode == 4
    mismatches = json.loads(done.stdout)["mismatches"]
    problems = {(p["table"], p.get("session_id"), p.get("row", "")[:10]): p["problem"] for p in mismatches}
    assert problems.pop(("messages", "chat-2", "message #2")) == "content differ"  # ids named too: each store's own
    assert problems.pop(("messages", "pin-5", "")) == "the target holds 0 message(s), the source 1"
    assert problems.pop(("sessions", "old-4", "")) == "missing from the target"
    usage = problems.pop(("session_model_usage", "deploy-1", ""))
    assert usage.startswith("input_tokens differ (input_tokens: source 1500, target 1499)")
    assert problems == {}
    human = run_cli(tmp_path, "verify", str(source), str(destination))
    assert human.returncode == 4 and "verification failed: 4 difference(s)" in human.stdout
    assert "MISMATCH sessions session_id=old-4: missing from the target" in human.stdout


async def test_a_session_whose_title_the_destination_holds_is_left_out_and_named(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    await build_store(source)
    destination = tmp_path / "b.db"
    async with SessionDB(destination) as db:
        await db.create_session("other", "cli")
        await db.set_session_title("other", "Compose outage")  # deploy-1's title in the source
    done = run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--json")
    assert done.returncode == 4
    report = json.loads(done.stdout)
    assert [(c["table"], c["key"]) for c in report["conflicts"]] == [("sessions", ["deploy-1"])]
    assert "'Compose outage' is already used by session 'other'" in report["conflicts"][0]["problem"]
    assert report["imported"] == 4 and report["detached"] == ["child-3"]  # its parent is the one left out
    assert "session_model_usage" not in report["inserted"]  # deploy-1's usage stays out with it
    found = {(m["table"], m.get("session_id")): m["problem"] for m in report["mismatches"]}
    assert found[("sessions", "deploy-1")] == "missing from the target"
    assert found[("sessions", "child-3")].startswith("parent_session_id differ")
    assert run_json(tmp_path, "--db", str(destination), "sessions", "show", "other")["session"]["title"] == "Compose outage"


def test_copy_refuses_the_same_store_and_bad_batches(tmp_path: Path) -> None:
    path = tmp_path / "same.db"
    assert run_cli(tmp_path, "--db", str(path), "quickstart").returncode == 0
    done = run_cli(tmp_path, "--db", str(path), "copy", "--to", str(tmp_path / "." / "same.db"))
    assert done.returncode == 1 and "same store" in one_error_line(done)
    done = run_cli(tmp_path, "--db", str(path), "copy", "--to", str(tmp_path / "x.db"), "--batch-messages", "0")
    assert done.returncode == 1 and "batch messages" in one_error_line(done)
    missing = run_cli(tmp_path, "--db", str(tmp_path / "absent.db"), "copy", "--to", str(tmp_path / "y.db"))
    assert missing.returncode == 3 and not (tmp_path / "absent.db").exists()
    assert run_cli(tmp_path, "--db", str(path), "copy").returncode == 2


@pytest.mark.slow  # kills a copy part-way, twice; test_cli_signals resumes one too
async def test_an_interrupted_copy_resumes_without_duplicates(tmp_path: Path) -> None:
    source = tmp_path / "src.db"
    sessions_in_source = 200
    total = await fill_store(source, sessions_in_source, 8)
    destination = tmp_path / "dst.db"
    args = ["--db", str(source), "copy", "--to", str(destination), "--batch-sessions", "3", "--batch-messages", "16"]
    process = subprocess.Popen([sys.executable, "-m", "hermes_state", *args], env=cli_env(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if destination.exists():
                try:
                    if count_rows(destination, "messages") >= 400:
                        break
                except sqlite3.OperationalError:
                    pass
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    sessions, messages = count_rows(destination, "sessions"), count_rows(destination, "messages")
    assert 400 <= messages < total, "the copy was not interrupted part-way"
    report = run_json(tmp_path, *args)
    assert report["imported"] == sessions_in_source - sessions and report["skipped"] == sessions
    assert report["inserted"]["messages"] == total - messages  # nothing written twice
    assert report["verified"] is True and report["conflicts"] == []
    assert count_rows(destination, "sessions") == sessions_in_source
    assert count_rows(destination, "messages") == total


async def test_a_partly_copied_large_session_is_completed(tmp_path: Path) -> None:
    source = tmp_path / "src.db"
    await fill_store(source, 1, 450, prefix="big")
    destination = tmp_path / "dst.db"
    async with SessionDB(source, read_only=True) as src, SessionDB(destination) as dst:
        # What an interrupted copy leaves: the session row (counters at zero) and a prefix of its messages.
        await dst.restore_rows("sessions", [{**row, "message_count": 0, "tool_call_count": 0}
                                            for row in await src.dump_rows("sessions")])
        await dst.restore_messages("big00000", await src.dump_messages("big00000", limit=130), start=0)
    report = run_json(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--batch-messages", "100")
    assert report["skipped"] == 1 and report["inserted"] == {"messages": 320} and report["verified"] is True
    fresh = tmp_path / "fresh.db"
    report = run_json(tmp_path, "--db", str(source), "copy", "--to", str(fresh), "--batch-messages", "100")
    assert report["imported"] == 1 and report["inserted"]["messages"] == 450 and report["verified"] is True
    assert run_json(tmp_path, "--db", str(fresh), "info")["messages"] == 450


def write_jsonl(path: Path, sessions: int, per_session: int) -> None:
    """An export-shaped JSON Lines file of ~900-byte messages, written directly (no store needed to make test data)."""
    filler = "lorem ipsum dolor sit amet " * 32
    with open(path, "w") as out:
        for s in range(sessions):
            messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"s{s} m{i} {filler}",
                         "timestamp": 1_700_000_000.0 + s * 10_000 + i} for i in range(per_session)]
            out.write(json.dumps({"id": f"bulk-{s:04d}", "source": "bulk", "started_at": 1_700_000_000.0 + s,
                                  "messages": messages}) + "\n")


def round_trip(home: Path, name: str, sessions: int, per_session: int) -> tuple[int, int]:
    """Import a generated file and export it again in measured subprocesses; returns both peaks (KiB).

    bench/transfer.py measures every command (import of an export, copy, verify too) at this size.
    """
    source = home / f"{name}.jsonl"
    write_jsonl(source, sessions, per_session)
    store = home / f"{name}.db"
    done, import_peak = run_measured(home, "--db", str(store), "import", str(source), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["imported"] == sessions
    exported = home / f"{name}-again.jsonl"
    done, export_peak = run_measured(home, "--db", str(store), "export", "-o", str(exported))
    assert done.returncode == 0, done.stderr
    assert f"{sessions * per_session} message(s)" in done.stdout
    original = {}
    with open(source) as handle:
        for line in handle:
            session = json.loads(line)
            original[session["id"]] = [(m["role"], m["content"], m["timestamp"]) for m in session["messages"]]
    again: dict[str, list[Any]] = {}
    with open(exported) as handle:
        for line in handle:
            item = json.loads(line)
            if item.get("table") == "messages":
                row = item["row"]
                again.setdefault(row["session_id"], []).append((row["role"], row["content"], row["timestamp"]))
    assert again == original
    return import_peak, export_peak


@pytest.mark.slow
def test_export_import_of_many_messages_in_bounded_memory(tmp_path: Path) -> None:
    # 30,000 messages of ~900 bytes: more data than the margins below, in a third of the rows
    # (and the time) of the 100,000 that bench/transfer.py measures.
    base = round_trip(tmp_path, "small", 10, 100)
    big = round_trip(tmp_path, "large", 30, 1000)
    assert (tmp_path / "large.jsonl").stat().st_size > 25 * 1024 * 1024  # more data than the memory allowed
    # Memory follows the batch size, not the store: 100x the data may cost only a fixed margin.
    print(f"peak RSS KiB: import {big[0]} (1k-message baseline {base[0]}), export {big[1]} (baseline {base[1]})")
    assert big[1] < base[1] + 24 * 1024
    assert big[0] < base[0] + 48 * 1024
