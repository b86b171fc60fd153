"""Ctrl-C and SIGTERM at any moment of ``copy`` and ``export``: one line, exit 130/143, stores consistent.

Each run is a real ``hermes-state`` process. ``tests/interrupt_launcher.py``
makes the process signal itself at one exact moment (while it imports a
module, when a function is called, after the command is done), so every
moment is reached on every run whatever the machine's speed; one test per
command also signals a plain ``python -m hermes_state`` from outside while
it works. After the signal: the exit status is 128 + the signal number,
stderr holds exactly the one line (no traceback), and the stores are whole:
the destination passes the integrity check, every session's counters agree
with the rows it holds (so ``doctor --repair`` has nothing to change), and a
second copy completes it without duplicates, exact; an export leaves no
partial file.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from hermes_state import SessionDB

from .cli_support import REPO, cli_env, fill_store, run_cli, run_json
from .full_store import fill_every_kind
from .raw_sql import is_postgres, store_target

LAUNCHER = REPO / "tests" / "interrupt_launcher.py"
LINES = {signal.SIGINT: "hermes-state: interrupted", signal.SIGTERM: "hermes-state: terminated"}
SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
SESSIONS, PER_SESSION = 40, 12

# Moments of a copy, in the order they happen.
COPY_MOMENTS = {
    "start-up: loading the command modules": "import:hermes_state.cli.copy",
    "argument parsing": "call:ArgumentParser.parse_known_args",
    "opening the stores": "import:hermes_state.store",
    "between two sessions": "call:RowWriter.finish_session:8",
    "while a batch is written": "call:WriterActor.submit:3",
    "verification": "call:compare_stores",
    "after the report": "return:_main",
}
EXPORT_MOMENTS = {
    "start-up: loading the command modules": "import:hermes_state.cli.transfer",
    "argument parsing": "call:ArgumentParser.parse_known_args",
    "mid-export": "call:_Exporter.rows:7",
    "after the summary": "return:_main",
}


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("signals") / "source.db"
    asyncio.run(fill_store(path, SESSIONS, PER_SESSION))
    return path


@pytest.fixture
def source(filled: Path, tmp_path: Path) -> Path:
    path = tmp_path / "source.db"
    shutil.copyfile(filled, path)
    return path


def interrupted(home: Path, when: str, signum: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER), when, signal.Signals(signum).name, "--", *args],
        capture_output=True, text=True, env=cli_env(home), cwd=str(home), timeout=240,
    )


def assert_one_line(done: subprocess.CompletedProcess[str], signum: int) -> None:
    lines = done.stderr.splitlines()
    assert lines and lines[0] == "launcher: signal sent", done.stderr  # the moment was reached
    assert lines[1:] == [LINES[signum]], done.stderr
    assert done.returncode == 128 + signum, done.stderr


def rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def assert_whole(path: Path) -> None:
    """The file passes SQLite's integrity check and every session's counter matches its rows."""
    assert rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert rows(path, "SELECT s.id FROM sessions AS s WHERE s.message_count <> "
                      "(SELECT COUNT(*) FROM messages AS m WHERE m.session_id = s.id)") == []


# Every moment with both signals in CI; by default one moment of each command, one signal each.
QUICK = {("while a batch is written", "SIGINT"), ("mid-export", "SIGTERM")}


def _matrix(moments: dict[str, str]) -> list[Any]:
    return [
        pytest.param(moment, signum, id=f"{moment}-{signum.name}",
                     marks=() if (moment, signum.name) in QUICK else pytest.mark.slow)
        for moment in moments for signum in (signal.SIGINT, signal.SIGTERM)
    ]


@pytest.mark.parametrize(("moment", "signum"), _matrix(COPY_MOMENTS))
def test_copy_stops_cleanly_at_every_moment(source: Path, tmp_path: Path, moment: str, signum: int) -> None:
    destination = tmp_path / "copy" / "state.db"
    args = ("--db", str(source), "copy", "--to", str(destination), "--batch-sessions", "4")
    done = interrupted(tmp_path, COPY_MOMENTS[moment], signum, *args)
    assert_one_line(done, signum)
    assert not list(source.parent.glob("source.db-*")), "the read side left -wal/-shm files"
    if moment == "after the report":
        assert "holds everything" in done.stdout
    assert_whole(source)
    if destination.exists():
        assert_whole(destination)  # counters agree with the rows wherever the copy stopped
    resumed = run_json(tmp_path, *args)  # a second run completes what the first one left
    assert resumed["verified"] is True and resumed["sessions"] == SESSIONS
    assert rows(destination, "SELECT COUNT(*) FROM messages") == [(SESSIONS * PER_SESSION,)]
    assert_whole(destination)


@pytest.mark.parametrize(("moment", "signum"), _matrix(EXPORT_MOMENTS))
def test_export_to_a_file_stops_cleanly_at_every_moment(source: Path, tmp_path: Path, moment: str, signum: int) -> None:
    out = tmp_path / "out" / "backup.jsonl"
    out.parent.mkdir()
    done = interrupted(tmp_path, EXPORT_MOMENTS[moment], signum, "--db", str(source), "export", "-o", str(out))
    assert_one_line(done, signum)
    assert not list(source.parent.glob("source.db-*")), "the read side left -wal/-shm files"
    leftovers = sorted(p.name for p in out.parent.iterdir())
    if moment == "after the summary":  # the file was complete before the signal
        assert leftovers == ["backup.jsonl"]
        assert '"end"' in out.read_text().splitlines()[-1]  # the end line: every row is there
    else:
        assert leftovers == [], "a partial export was left behind"
    assert_whole(source)


@pytest.mark.slow
@SIGNALS
def test_export_to_stdout_stops_cleanly_mid_stream(source: Path, tmp_path: Path, signum: int) -> None:
    done = interrupted(tmp_path, EXPORT_MOMENTS["mid-export"], signum, "--db", str(source), "export")
    assert_one_line(done, signum)
    written = done.stdout.splitlines()
    assert written and '"end"' not in written[-1]  # some rows went out, then it stopped before the end line
    for line in written[:-1]:
        json.loads(line)
    assert_whole(source)


def _signal_when(process: subprocess.Popen[str], ready: Callable[[], bool], signum: int) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if ready():
                process.send_signal(signum)
                break
            time.sleep(0.01)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _sessions_in(path: Path) -> int:
    try:
        return int(rows(path, "SELECT COUNT(*) FROM sessions")[0][0])  # type: ignore[call-overload]
    except sqlite3.Error:  # not created yet
        return 0


@pytest.mark.parametrize("signum", [pytest.param(signal.SIGINT, marks=pytest.mark.slow, id="SIGINT"),
                                    pytest.param(signal.SIGTERM, id="SIGTERM")])
async def test_a_running_copy_signalled_from_outside(tmp_path: Path, signum: int) -> None:
    """No launcher: the plain command, signalled by another process once sessions arrive."""
    source = tmp_path / "big.db"
    await fill_store(source, 400, 4)
    destination = tmp_path / "copy.db"
    args = ["--db", str(source), "copy", "--to", str(destination), "--batch-sessions", "1"]
    process = subprocess.Popen([sys.executable, "-m", "hermes_state", *args], env=cli_env(tmp_path), cwd=str(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = await asyncio.to_thread(_signal_when, process, lambda: destination.exists() and _sessions_in(destination) >= 5,
                                   signum)
    assert done.stderr.splitlines() == [LINES[signum]], done.stderr
    assert done.returncode == 128 + signum
    copied = _sessions_in(destination)
    assert 5 <= copied < 400, "the copy was not interrupted part-way"
    assert_whole(destination)
    resumed = run_json(tmp_path, *args)
    assert resumed["verified"] is True and resumed["already_there"]["sessions"] == copied


async def test_a_copy_to_postgres_stops_cleanly_and_resumes(source: Path, tmp_path: Path, pg_dsn: str) -> None:
    url = "postgresql://" + pg_dsn.split("://", 1)[1]
    args = ("--db", str(source), "copy", "--to", url, "--batch-sessions", "4")
    done = await asyncio.to_thread(interrupted, tmp_path, COPY_MOMENTS["while a batch is written"], signal.SIGTERM, *args)
    assert_one_line(done, signal.SIGTERM)
    doctor = run_json(tmp_path, "--db", url, "doctor")
    assert doctor["ok"] is True, doctor  # counters, orphans, indexes: consistent
    resumed = run_json(tmp_path, *args)
    assert resumed["verified"] is True and resumed["sessions"] == SESSIONS


@pytest.mark.parametrize("feeder", ["copy", "import"])
async def test_an_interrupted_transfer_survives_doctor_repair_and_resumes_exactly(
    source: Path, tmp_path: Path, store: Any, feeder: str
) -> None:
    """Stopped inside a session, repaired by ``doctor --repair``, run again: ``verify`` finds the target exact.

    The source has counters that differ from its rows (a compacted session)
    and tool calls; the copy (or the import of its export) stops when the
    20th session's messages are queued, three batches of 50 in, the last
    one ending inside a session.
    """
    async with SessionDB(source) as db:
        await fill_every_kind(db)
        counts = {row["id"]: await db.message_count(row["id"]) for row in await db.dump_rows("sessions", limit=1000)}
    target = store_target(store)
    if is_postgres(store):
        target = "postgresql://" + target.split("://", 1)[1]
    if feeder == "copy":
        args: tuple[str, ...] = ("--db", str(source), "copy", "--to", target)
    else:
        export = tmp_path / "all.jsonl"
        assert run_cli(tmp_path, "--db", str(source), "export", "-o", str(export)).returncode == 0
        args = ("--db", target, "import", str(export))
    args += ("--batch-messages", "50")
    done = await asyncio.to_thread(interrupted, tmp_path, "call:RowWriter.finish_session:20", signal.SIGTERM, *args)
    assert_one_line(done, signal.SIGTERM)
    held = {session_id: await store.message_count(session_id) for session_id in counts}
    assert len([s for s in counts if 0 < held[s] < counts[s]]) == 1  # stopped inside a session
    doctor = run_json(tmp_path, "--db", target, "doctor", "--repair")
    assert doctor["ok"] is True and doctor["repair"]["steps"] == [], doctor
    assert (await store.repair_store())["steps"] == []  # the store's own recount (SQLite's too) finds nothing to fix
    resumed = run_json(tmp_path, *args)
    assert resumed["conflicts"] == [] and resumed["skipped"] + resumed["imported"] == len(counts)
    assert resumed["inserted"]["messages"] == sum(counts.values()) - sum(held.values())  # nothing twice
    assert run_cli(tmp_path, "verify", str(source), target).returncode == 0  # every row and column, counters too
    assert run_json(tmp_path, "--db", target, "doctor")["ok"] is True


def test_a_signal_during_a_read_command(source: Path, tmp_path: Path) -> None:
    """Not only copy and export: the guard sits in the entry point, so every command has it."""
    done = interrupted(tmp_path, "call:_list_rows", signal.SIGINT, "--db", str(source), "sessions", "list")
    assert_one_line(done, signal.SIGINT)
    assert run_cli(tmp_path, "--db", str(source), "info").returncode == 0
