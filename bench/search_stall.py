"""One message must never stall the store: plain reads while pathological searches run.

The store: the Zipf corpus of ``bench/search_zipf.py`` (100 sessions x
1,000 messages) plus one 2.9 MB log-like tool message holding ``error``
80,000 times (issue 10 item 5). Measured in one run:

  idle    p95 of ``get_messages`` of a whole other session (1,000 messages),
          nothing else running
  loaded  the same calls while 4 tasks search ``error`` back to back (every
          search ranks, snippets and windows the 2.9 MB row)

Targets: loaded p95 <= 2 x idle p95, and every pathological search returns
or raises ``SearchTimeoutError`` within its deadline
(``sessions.search_timeout_ms``, ``--deadline-ms``; a small grace covers
the event loop noticing).

    python3 bench/search.py --suite stall
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from bench.search_workload import pct
from bench.search_zipf import PER_SESSION, SESSIONS, prepare

SEARCHERS = 4
TARGET_RATIO = 2.0
GRACE_MS = 250.0
HITS = 80_000


def pathological_message() -> str:
    """About 2.9 MB of 36-character log lines, ``error`` 80,000 times."""
    return "".join(f"12:{i % 60:02d}:{i * 7 % 60:02d} w{i % 16:02d} error: retry req {i:05d}\n" for i in range(HITS))


async def timed_reads(db: Any, count: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        sid = f"zipf-{rng.randrange(SESSIONS):03d}"
        start = time.perf_counter()
        rows = await db.get_messages(sid)
        out.append((time.perf_counter() - start) * 1000)
        assert len(rows) == PER_SESSION
        await asyncio.sleep(0)
    return out


async def searcher(db: Any, stop: asyncio.Event, outcomes: list[tuple[str, float]]) -> None:
    from hermes_state import SearchTimeoutError

    while not stop.is_set():
        start = time.perf_counter()
        try:
            hits = await db.search_messages("error", limit=20)
            outcome = f"returned {len(hits)}"
        except SearchTimeoutError:
            outcome = "timed out"
        outcomes.append((outcome, (time.perf_counter() - start) * 1000))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from hermes_state import SessionDB

    home, cached = await prepare(args)
    out = cached.parent
    (home / "config.yaml").write_text(f"sessions:\n  search_timeout_ms: {args.deadline_ms}\n")
    seeded = out / f"{cached.stem}-pathological.db"
    if args.rebuild or not seeded.exists():
        shutil.copyfile(cached, seeded)
        text = pathological_message()
        async with SessionDB(seeded) as db:
            await db.create_session("pathological", "cli")
            started = time.perf_counter()
            await db.append_message("pathological", "tool", text, tool_name="terminal")
            print(f"  appended the {len(text) / 1e6:.1f} MB message ({text.count('error'):,} x error) "
                  f"in {time.perf_counter() - started:.1f} s")
    work = out / f"stall-work-{os.getpid()}.db"
    shutil.copyfile(seeded, work)
    try:
        async with SessionDB(work) as db:
            await timed_reads(db, 20, 1)  # warm the page cache
            idle = await timed_reads(db, args.reads, 2)
            stop = asyncio.Event()
            outcomes: list[tuple[str, float]] = []
            tasks = [asyncio.create_task(searcher(db, stop, outcomes)) for _ in range(SEARCHERS)]
            await asyncio.sleep(0.2)
            loaded = await timed_reads(db, args.reads, 3)
            stop.set()
            await asyncio.gather(*tasks)
            info = await db.storage_info()
        return {"idle": idle, "loaded": loaded, "outcomes": outcomes, "info": info}
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)


def report(args: argparse.Namespace, data: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    info = data["info"]
    idle95, loaded95 = pct(data["idle"], 95), pct(data["loaded"], 95)
    ratio = loaded95 / idle95
    times = [ms for _, ms in data["outcomes"]]
    timed_out = sum(1 for outcome, _ in data["outcomes"] if outcome == "timed out")
    worst = max(times) if times else float("nan")
    within = bool(times) and worst <= args.deadline_ms + GRACE_MS
    print()
    print(f"get_messages (1,000 messages) while {SEARCHERS} tasks search 'error' over a 2.9 MB row with {HITS:,} hits; "
          f"{info['driver']} SQLite {info['sqlite_version']}, {os.cpu_count()} CPUs")
    print(f"  idle    p50 {pct(data['idle'], 50):7.2f} ms  p95 {idle95:7.2f} ms  ({len(data['idle'])} reads)")
    print(f"  loaded  p50 {pct(data['loaded'], 50):7.2f} ms  p95 {loaded95:7.2f} ms  -> {ratio:.2f}x idle p95 "
          f"(target <= {TARGET_RATIO:.0f}x): {'ok' if ratio <= TARGET_RATIO else 'MISSES'}")
    print(f"  pathological searches: {len(times)} ({timed_out} timed out), p50 {pct(times, 50):.1f} ms, "
          f"p95 {pct(times, 95):.1f} ms, max {worst:.1f} ms; deadline {args.deadline_ms:.0f} ms: "
          f"{'ok' if within else 'MISSES'}")
    summary = {"idle_p95": idle95, "loaded_p95": loaded95, "ratio": ratio, "searches": len(times),
               "timed_out": timed_out, "search_p95": pct(times, 95), "search_max": worst, "deadline_ms": args.deadline_ms}
    return ratio <= TARGET_RATIO and within, summary
