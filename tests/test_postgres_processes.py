"""Issue 12: several OS worker processes on one PostgreSQL database, and one SIGKILLed mid-batch."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hermes_state.postgres import SessionDB

pytestmark = pytest.mark.backends("postgres")

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


async def _spawn(*args: str) -> Any:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.pg_worker", *args, cwd=str(ROOT), env=_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def test_four_processes_of_fifty_agents_lose_and_duplicate_nothing(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("shared", "cli")
    procs = [await _spawn("agents", pg_dsn, f"w{w}", "50", "4") for w in range(4)]
    acknowledged: dict[str, list[str]] = {}
    for proc in procs:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, err.decode()
        report = json.loads(out.decode().strip().splitlines()[-1])
        assert report["stats"]["commands_per_batch_max"] >= 1
        for session_id, contents in report["acknowledged"].items():
            acknowledged.setdefault(session_id, []).extend(contents)
    assert sum(map(len, acknowledged.values())) == 4 * 50 * 4
    async with SessionDB(pg_dsn, read_only=True) as db:
        sessions = [s for s in acknowledged]
        assert len(sessions) == 4 * 50 + 1
        for session_id in sessions:
            rows = [m["content"] for m in await db.get_messages(session_id)]
            assert Counter(rows) == Counter(acknowledged[session_id]), session_id  # nothing lost, nothing twice
            assert (await db.get_session(session_id) or {})["message_count"] == len(rows)
            # Each agent awaited its appends one after another: its rows keep that order.
            for agent in {c.rsplit("-", 1)[0] for c in rows}:
                mine = [int(c.rsplit("-", 1)[1]) for c in rows if c.rsplit("-", 1)[0] == agent]
                assert mine == sorted(mine), (session_id, agent)


async def test_a_worker_killed_mid_batch_keeps_every_acknowledged_row(pg_dsn: str) -> None:
    async with SessionDB(pg_dsn) as db:
        await db.create_session("k", "cli")
    proc = await _spawn("stream", pg_dsn, "k")
    acknowledged: list[str] = []
    assert proc.stdout is not None
    while len(acknowledged) < 120:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
        assert line, (await proc.stderr.read()).decode() if proc.stderr else "worker ended"
        acknowledged.append(line.decode().strip())
    proc.send_signal(signal.SIGKILL)  # appends are in flight: the kill lands inside a batch
    rest, _ = await proc.communicate()
    acknowledged.extend(rest.decode().split())  # printed just before the kill
    assert proc.returncode == -signal.SIGKILL
    fresh = await _spawn("resume", pg_dsn, "k")
    out, err = await asyncio.wait_for(fresh.communicate(), timeout=60)
    assert fresh.returncode == 0, err.decode()
    resumed = json.loads(out.decode().strip().splitlines()[-1])
    stored = resumed["before"]
    assert set(acknowledged) <= set(stored)  # every acknowledged row is there
    assert len(stored) == len(set(stored))  # none twice
    assert stored == sorted(stored, key=lambda c: int(c[1:]))  # and in issue order
    assert resumed["message_count"] == len(stored) + 1  # counters match rows, the resumed append included
