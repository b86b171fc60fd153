"""``copy`` between stores and bulk ``export``/``import``, through subprocesses on real files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .cli_support import build_store, cli_env, fill_store, one_error_line, run_cli, run_json

# VmHWM is this process's own peak; getrusage's ru_maxrss would carry over the forking
# pytest process's peak across exec on Linux.
PEAK_RSS = """
import sys
from hermes_state.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
sys.stderr.write(f"peak_rss_kib={peak}\\n")
raise SystemExit(code)
"""


def run_measured(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run the command in a subprocess that reports its own peak RSS (KiB)."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *args], capture_output=True, text=True,
                          env=cli_env(home), timeout=600, cwd=str(home))
    marker = [line for line in done.stderr.splitlines() if line.startswith("peak_rss_kib=")]
    assert marker, done.stderr
    return done, int(marker[-1].split("=", 1)[1])


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
    assert "copied 5 session(s)" in done.stdout and "verified 5 session(s)" in done.stdout
    back = tmp_path / "c" / "state.db"
    report = run_json(tmp_path, "--db", str(back), "copy", "--from", str(destination))
    assert report["imported"] == 5 and report["verified"] is True and report["mismatches"] == []
    assert run_json(tmp_path, "--db", str(back), "info")["messages"] == 9
    child = run_json(tmp_path, "--db", str(back), "sessions", "show", "child-3")["session"]
    assert child["parent_session_id"] == "deploy-1"
    again = run_json(tmp_path, "--db", str(source), "copy", "--to", str(destination))
    assert again["imported"] == 0 and again["skipped"] == 5 and again["verified"] is True


async def test_copy_verification_fails_on_any_difference(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    await build_store(source)
    destination = tmp_path / "b.db"
    assert run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination)).returncode == 0
    conn = sqlite3.connect(destination)
    conn.execute("UPDATE messages SET content = 'tampered' WHERE session_id = 'chat-2' AND role = 'assistant'")
    conn.execute("DELETE FROM messages WHERE session_id = 'pin-5'")
    conn.commit()
    conn.close()
    assert run_cli(tmp_path, "--db", str(destination), "sessions", "delete", "old-4").returncode == 0
    done = run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--verify-only", "--json")
    assert done.returncode == 4
    problems = {p["session_id"]: p["problem"] for p in json.loads(done.stdout)["mismatches"]}
    assert problems == {
        "chat-2": "message content differs",
        "pin-5": "0 messages in the destination, 1 in the source",
        "old-4": "missing from the destination",
    }
    human = run_cli(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--verify-only")
    assert human.returncode == 4 and "verification failed: 3 of 5 session(s) differ" in human.stdout


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


async def test_an_interrupted_copy_resumes_without_duplicates(tmp_path: Path) -> None:
    source = tmp_path / "src.db"
    total = await fill_store(source, 600, 8)
    destination = tmp_path / "dst.db"
    args = ["--db", str(source), "copy", "--to", str(destination), "--batch-sessions", "3"]
    process = subprocess.Popen([sys.executable, "-m", "hermes_state", *args], env=cli_env(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if destination.exists():
                try:
                    if count_rows(destination, "sessions") >= 30:
                        break
                except sqlite3.OperationalError:
                    pass
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    copied = count_rows(destination, "sessions")
    assert 30 <= copied < 600, "the copy was not interrupted part-way"
    report = run_json(tmp_path, *args)
    assert report["imported"] == 600 - copied and report["skipped"] == copied
    assert report["verified"] is True
    assert count_rows(destination, "sessions") == 600
    assert count_rows(destination, "messages") == total


async def test_a_partly_copied_large_session_is_completed(tmp_path: Path) -> None:
    source = tmp_path / "src.db"
    await fill_store(source, 1, 450, prefix="big")
    exported = run_cli(tmp_path, "--db", str(source), "export").stdout
    session = json.loads(exported)
    session["messages"] = session["messages"][:130]  # what an interrupted copy leaves: a prefix
    partial = tmp_path / "partial.jsonl"
    partial.write_text(json.dumps(session) + "\n")
    destination = tmp_path / "dst.db"
    assert run_json(tmp_path, "--db", str(destination), "import", str(partial))["imported"] == 1
    report = run_json(tmp_path, "--db", str(source), "copy", "--to", str(destination), "--batch-messages", "100")
    assert report["skipped"] == 1 and report["appended_messages"] == 320 and report["verified"] is True
    fresh = tmp_path / "fresh.db"
    report = run_json(tmp_path, "--db", str(source), "copy", "--to", str(fresh), "--batch-messages", "100")
    assert report["imported"] == 1 and report["appended_messages"] == 350 and report["verified"] is True
    assert run_json(tmp_path, "--db", str(fresh), "info")["messages"] == 450


def write_jsonl(path: Path, sessions: int, per_session: int) -> None:
    """An export-shaped JSON Lines file, written directly (no store needed to make test data)."""
    filler = "lorem ipsum dolor sit amet " * 8
    with open(path, "w") as out:
        for s in range(sessions):
            messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"s{s} m{i} {filler}",
                         "timestamp": 1_700_000_000.0 + s * 10_000 + i} for i in range(per_session)]
            out.write(json.dumps({"id": f"bulk-{s:04d}", "source": "bulk", "started_at": 1_700_000_000.0 + s,
                                  "messages": messages}) + "\n")


def round_trip(home: Path, name: str, sessions: int, per_session: int) -> tuple[int, int]:
    """Import a generated file and export it again in measured subprocesses; returns both peaks (KiB)."""
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
    with open(exported) as handle:
        for line in handle:
            session = json.loads(line)
            assert [(m["role"], m["content"], m["timestamp"]) for m in session["messages"]] == original.pop(session["id"])
    assert original == {}
    return import_peak, export_peak


@pytest.mark.slow
def test_export_import_of_100k_messages_in_bounded_memory(tmp_path: Path) -> None:
    base_import, base_export = round_trip(tmp_path, "small", 10, 100)
    big_import, big_export = round_trip(tmp_path, "large", 100, 1000)
    assert (tmp_path / "large.jsonl").stat().st_size > 25 * 1024 * 1024  # more data than the memory allowed
    # Memory follows the batch size, not the store: 100x the data may cost only a fixed margin.
    print(f"peak RSS KiB: import {big_import} (1k-message baseline {base_import}), "
          f"export {big_export} (baseline {base_export})")
    assert big_export < base_export + 24 * 1024
    assert big_import < base_import + 48 * 1024
