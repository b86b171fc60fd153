"""Turn leases between real OS processes on one database (SQLite file and PostgreSQL schema).

Workers are ``python -m tests.lease_worker`` processes; a worker in a PID
namespace of its own (``unshare``) stands for a worker on another host.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import BACKENDS
from .raw_sql import open_store

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """A SQLite path, or a PostgreSQL DSN with a schema of its own."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_dsn"))
    db_path.parent.mkdir(parents=True, exist_ok=True)
    return str(db_path)


def worker(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "tests.lease_worker", *args],
        stdin=subprocess.PIPE if args[0] == "waits" else None,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )


def line_of(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        proc.wait(timeout=timeout)
        assert proc.stderr is not None
        pytest.fail(f"worker exited early ({proc.returncode}): {proc.stderr.read()}")
    return line


async def contents(target: str, session_id: str) -> list[Any]:
    db = open_store(target)
    try:
        return [m["content"] for m in await db.get_messages(session_id)]
    finally:
        await db.close()


async def kill_and_take_over(target: str, proc: subprocess.Popen[str]) -> float:
    """SIGKILL the holder, wait for its lease as ``successor``, write fenced; returns when it was held."""
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait, 30)
    db = open_store(target)
    try:
        assert await db.acquire_session_turn_lease("s", "successor", wait_seconds=30, poll_interval_seconds=0.05)
        held = time.time()
        await db.append_message("s", "user", "successor:start", turn_lease_holder="successor")
    finally:
        await db.close()
    return held


async def seed(target: str, session_id: str = "s") -> None:
    db = open_store(target)
    try:
        await db.create_session(session_id, "cli")
    finally:
        await db.close()


@pytest.mark.slow
async def test_four_processes_never_interleave_their_turns(target: str) -> None:
    await seed(target)
    turns = 6
    procs = [worker("turns", target, "s", f"w{k}", str(turns)) for k in range(4)]
    reports = [json.loads(await asyncio.to_thread(line_of, proc, 120)) for proc in procs]
    for proc in procs:
        assert await asyncio.to_thread(proc.wait, 60) == 0
    transcript = await contents(target, "s")
    assert len(transcript) == 4 * turns * 2
    for start, end in zip(transcript[::2], transcript[1::2]):
        who, turn, kind = start.split(":")
        assert (kind, end) == ("start", f"{who}:{turn}:end"), transcript  # nothing between a turn's two rows
    for report in reports:
        assert report["tokens"] == sorted(report["tokens"]) and len(set(report["tokens"])) == turns
    every_token = [t for r in reports for t in r["tokens"]]
    assert len(set(every_token)) == len(every_token)  # no acquisition ever shared a token
    assert sum(r["waited"] for r in reports) > 0  # they did contend


@pytest.mark.slow
async def test_a_stale_holder_is_refused_after_a_takeover(target: str) -> None:
    await seed(target)
    go = Path(target + ".go") if not target.startswith("postgresql") else Path(os.environ["HERMES_HOME"]) / "go"
    proc = worker("stale", target, "s", "worker-a", str(go))
    try:
        assert await asyncio.to_thread(line_of, proc) == "held"
        db = open_store(target)
        try:
            # worker-a's lease (TTL 0.5 s, never refreshed) expires; worker-b takes over.
            assert await db.acquire_session_turn_lease("s", "worker-b", wait_seconds=10, poll_interval_seconds=0.05)
            go.touch()
            assert await asyncio.to_thread(line_of, proc) == "refused"
            await db.append_message("s", "user", "worker-b:start", turn_lease_holder="worker-b")
            assert await db.refresh_session_turn_lease("s", "worker-b")  # worker-a's exit released nothing of b's
        finally:
            await db.close()
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert await contents(target, "s") == ["worker-a:start", "worker-b:start"]


@pytest.mark.slow
async def test_a_killed_holder_on_this_host_is_taken_over_before_its_ttl(target: str) -> None:
    await seed(target)
    proc = worker("hold", target, "s", "doomed", "600")
    try:
        assert (await asyncio.to_thread(line_of, proc)).startswith("held")
        db = open_store(target)
        try:
            assert not await db.try_acquire_session_turn_lease("s", "successor")
        finally:
            await db.close()
        started = time.time()
        assert await kill_and_take_over(target, proc) - started < 10  # the recorded process is gone: no 600 s wait
    finally:
        if proc.poll() is None:
            proc.kill()
    assert await contents(target, "s") == ["doomed:start", "successor:start"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
async def test_a_killed_holder_on_another_host_is_taken_over_after_its_ttl(target: str) -> None:
    """A holder in its own PID namespace stands for another host: its pid means nothing here."""
    await seed(target)
    ttl = 3.0
    proc = worker("hold", target, "s", "remote", str(ttl), prefix=("unshare", "--pid", "--fork", "--kill-child"))
    try:
        line = await asyncio.to_thread(line_of, proc)
        acquired_at = time.time()
        assert line == "held 1"  # pid 1 of its own namespace
        assert await kill_and_take_over(target, proc) - acquired_at >= ttl - 0.5  # the TTL decided, not a pid lookup
    finally:
        if proc.poll() is None:
            proc.kill()
    assert await contents(target, "s") == ["remote:start", "successor:start"]


async def test_a_release_wakes_a_waiter_in_another_process_at_once(target: str) -> None:
    """No poll: the waiter polls every 20 s, so only a wake-up (NOTIFY, or the SQLite store's sockets) is quick."""
    await seed(target)
    rounds = 3
    proc = worker("waits", target, "s", "child", str(rounds))
    db = open_store(target)
    try:
        for _ in range(rounds):
            assert await db.try_acquire_session_turn_lease("s", "parent")
            await asyncio.to_thread(_send, proc, "go")
            assert await asyncio.to_thread(line_of, proc) == "waiting"
            await asyncio.sleep(0.2)
            await db.release_session_turn_lease("s", "parent")
            released = time.time()
            held = float(await asyncio.to_thread(line_of, proc))
            assert held - released < 2.0
            await asyncio.sleep(0.1)
            assert await db.acquire_session_turn_lease("s", "parent", wait_seconds=10, poll_interval_seconds=0.05)
            await db.release_session_turn_lease("s", "parent")
        assert await asyncio.to_thread(proc.wait, 30) == 0
        if not target.startswith("postgresql"):
            wake = Path(target + "-wake")
            assert not wake.exists() or (wake.stat().st_mode & 0o777) == 0o700
    finally:
        if proc.poll() is None:
            proc.kill()
        await db.close()


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def self_handoffs(holders: list[str]) -> dict[str, float]:
    """Per worker: the share of its releases whose next turn went back to it, while another worker still had turns."""
    last_turn = {who: k for k, who in enumerate(holders)}
    counted: dict[str, list[int]] = {}
    for k in range(len(holders) - 1):
        who = holders[k]
        if any(last > k for other, last in last_turn.items() if other != who):  # somebody else still waited
            counted.setdefault(who, []).append(holders[k + 1] == who)
    return {who: sum(flags) / len(flags) for who, flags in counted.items()}


@pytest.mark.slow
async def test_turns_go_to_waiters_in_the_order_they_began_waiting(target: str) -> None:
    """Four processes loop over 10 ms turns: a releasing process re-queues behind the others instead of winning again."""
    await seed(target)
    go = Path(target + ".go") if not target.startswith("postgresql") else Path(os.environ["HERMES_HOME"]) / "go-fair"
    turns = 12
    procs = [worker("fair", target, "s", f"w{k}", f"{turns}:{go}") for k in range(4)]
    try:
        for proc in procs:
            assert await asyncio.to_thread(line_of, proc, 120) == "ready"
        go.touch()
        reports = [json.loads(await asyncio.to_thread(line_of, proc, 120)) for proc in procs]
        for proc in procs:
            assert await asyncio.to_thread(proc.wait, 60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    holders = [text.split(":")[0] for text in await contents(target, "s")]
    assert len(holders) == 4 * turns
    shares = self_handoffs(holders)
    assert max(shares.values()) <= 0.25, (shares, holders)
    assert all(r["longest_wait"] < 10.0 for r in reports)
