"""Listing and export benchmarks for ``hermes_state.SessionDB``, with peak memory per contender.

Two parts, each contender in its own fresh subprocess (so one contender's
heap never inflates another's figure):

  (L) ``list_sessions_rich`` over 10,000 sessions (roots, compression chains,
      delegates, branches; a few messages each). Contenders: the store's
      default page (50 rows), its ``order_by_last_active`` page, the full
      listing (``limit=10000``), ``session_count(exclude_children=True)``,
      and the baseline: the plain synchronous driver reading the same page /
      all rows with ``SELECT * FROM sessions`` (no preview, no last activity,
      no tip projection: the floor a rich listing is compared with).
  (E) exporting ``--messages N`` messages (default 1,000,000, in sessions of
      1,000 messages) and, to show that the streaming forms do not grow with
      the store, the same at N/4. Contenders: ``export_all()`` (returns a
      list; the baseline), ``iter_export_all()`` (async iterator, each
      session dropped after use) and ``export_all_to(path)`` (JSON Lines).

Every contender runs twice in separate subprocesses: once timed (median of
``--repeat`` runs for the listing, one run for exports) with ``ru_maxrss``,
once under ``tracemalloc`` for the peak Python heap (tracemalloc slows code
down, so its run is not timed). Ratios are against the baseline measured in
the same run. Counts are checked: every contender must return exactly the
rows and messages that were written.

Run from the repository root::

    python3 bench/surface.py                    # full run: 1,000,000 messages (a few minutes)
    python3 bench/surface.py --messages 100000  # smaller export part
    python3 bench/surface.py --json bench/out/surface.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

SEED = 20240611
LIST_SESSIONS = 10_000
PAGE = 50
EXPORT_SESSION_SIZE = 1_000
TEXT_POOL = 4096


def _texts(seed: int) -> list[str]:
    """A pool of 40-400 character texts (the generator of ``bench/append.py``, seeded)."""
    from bench.append import make_texts

    return make_texts(TEXT_POOL, seed)


# --------------------------------------------------------------------- fixtures

_MSG_SQL = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp, observed) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, 0)"
)


def _create_schema(path: Path) -> None:
    from hermes_state import SessionDB

    async def run() -> None:
        db = SessionDB(path)
        try:
            await db.storage_info()
        finally:
            await db.close()

    asyncio.run(run())


def _raw(path: Path) -> Any:
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def build_listing_store(path: Path) -> dict[str, int]:
    """10,000 sessions: roots, compression chains, delegates and branches; 2-6 messages each."""
    _create_schema(path)
    rng = random.Random(SEED)
    texts = _texts(SEED)
    conn = _raw(path)
    now = time.time()
    sessions: list[tuple[Any, ...]] = []
    messages: list[tuple[Any, ...]] = []
    listable = 0
    i = 0
    while len(sessions) < LIST_SESSIONS:
        kind = rng.random()
        started = now - rng.uniform(0, 90 * 86400)
        root = f"s{i:05d}"
        i += 1
        title = f"Session {i}" if rng.random() < 0.3 else None
        if kind < 0.1 and len(sessions) + 2 <= LIST_SESSIONS:  # compression chain: root + live tip
            sessions.append((root, "cli", None, started, started + 60, "compression", None, title))
            sessions.append((f"{root}-tip", "cli", root, started + 61, None, None, None, None))
            listable += 1
            owners = [root, f"{root}-tip"]
        elif kind < 0.15 and sessions:  # delegate sub-agent of an earlier root
            parent = sessions[rng.randrange(len(sessions))][0]
            sessions.append((root, "tool", parent, started, None, None, json.dumps({"_delegate_from": parent}), None))
            owners = [root]
        elif kind < 0.2 and sessions:  # /branch child
            parent = sessions[rng.randrange(len(sessions))][0]
            sessions.append((root, "cli", parent, started, None, None, json.dumps({"_branched_from": parent}), title))
            listable += 1
            owners = [root]
        else:
            sessions.append((root, rng.choice(("cli", "tui", "telegram")), None, started, None, None, None, title))
            listable += 1
            owners = [root]
        for owner in owners:
            stamp = started
            for n in range(rng.randint(2, 6)):
                stamp += rng.uniform(1, 600)
                messages.append((owner, "user" if n % 2 == 0 else "assistant", rng.choice(texts), None, None,
                                 None, stamp))
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO sessions (id, source, parent_session_id, started_at, ended_at, end_reason, model_config, title) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        sessions,
    )
    conn.executemany(_MSG_SQL, messages)
    conn.execute("UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages WHERE session_id = sessions.id)")
    conn.execute("COMMIT")
    conn.close()
    return {"sessions": len(sessions), "listable": listable, "messages": len(messages)}


def build_export_store(path: Path, total: int) -> dict[str, int]:
    """``total`` messages in sessions of 1,000 (user/assistant turns, some tool calls and results)."""
    _create_schema(path)
    texts = _texts(SEED + 1)
    calls = json.dumps([{"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}])
    conn = _raw(path)
    now = time.time() - 30 * 86400
    n_sessions = (total + EXPORT_SESSION_SIZE - 1) // EXPORT_SESSION_SIZE
    written = 0
    for s in range(n_sessions):
        sid = f"e{s:06d}"
        count = min(EXPORT_SESSION_SIZE, total - written)
        rows = []
        for n in range(count):
            kind = n % 4
            role = ("user", "assistant", "assistant", "tool")[kind]
            rows.append((sid, role, texts[(s * 7 + n) % len(texts)], "call_1" if kind == 3 else None,
                         calls if kind == 2 else None, "terminal" if kind == 3 else None, now + s * 1000 + n))
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, message_count) VALUES (?, 'bench', ?, ?)",
            (sid, now + s * 1000, count),
        )
        conn.executemany(_MSG_SQL, rows)
        conn.execute("COMMIT")
        written += count
    conn.close()
    return {"sessions": n_sessions, "messages": written}


# ------------------------------------------------------------------ contenders


def _floor_rows(path: Path, limit: int | None) -> tuple[float, int]:
    """The baseline: plain ``SELECT * FROM sessions`` page on the sync driver; returns (seconds, rows)."""
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(path))
    try:
        conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()  # open outside the measured region
        t0 = time.perf_counter()
        sql = "SELECT * FROM sessions ORDER BY started_at DESC" + (f" LIMIT {limit}" if limit else "")
        cur = conn.execute(sql)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, row)) for row in cur.fetchall()]
        return time.perf_counter() - t0, len(rows)
    finally:
        conn.close()


async def _store_op(path: Path, op: str, out: Path) -> tuple[float, int, int]:
    """Run one store operation on an already opened store; returns (seconds, sessions, messages)."""
    from hermes_state import SessionDB

    db = SessionDB(path)
    try:
        await db.storage_info()  # open outside the measured region
        t0 = time.perf_counter()
        sessions, messages = await _timed_op(db, op, out)
        seconds = time.perf_counter() - t0
    finally:
        await db.close()
    return seconds, sessions, messages


def _written_messages(out: Path) -> int:
    """Messages in a JSON Lines export (counted after the measured region)."""
    with open(out, "rb") as handle:
        return sum(line.count(b'"role":') for line in handle)


async def _timed_op(db: Any, op: str, out: Path) -> tuple[int, int]:
    if op == "list_page":
        return len(await db.list_sessions_rich(limit=PAGE)), 0
    if op == "list_page_last_active":
        return len(await db.list_sessions_rich(limit=PAGE, order_by_last_active=True)), 0
    if op == "list_all":
        return len(await db.list_sessions_rich(limit=LIST_SESSIONS)), 0
    if op == "count_listable":
        return await db.session_count(exclude_children=True), 0
    if op == "export_all":
        sessions = await db.export_all()
        return len(sessions), sum(len(s["messages"]) for s in sessions)
    if op == "iter_export_all":
        n = m = 0
        async for session in db.iter_export_all():
            n += 1
            m += len(session["messages"])
        return n, m
    if op == "export_all_to":
        return await db.export_all_to(out), 0
    raise ValueError(op)


def child(args: argparse.Namespace) -> None:
    """Subprocess entry: run ``args.op`` once per repeat; print one JSON line with the figures."""
    path = Path(args.db)
    out = Path(args.out or (path.parent / "child-export.jsonl"))
    traced = bool(args.trace)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times: list[float] = []
    counts = (0, 0)
    peak = None
    for _ in range(args.repeat):
        if traced:
            tracemalloc.start()
        if args.op.startswith("floor_"):
            seconds, rows = _floor_rows(path, PAGE if args.op == "floor_page" else None)
            counts = (rows, 0)
            times.append(seconds)
        else:
            seconds, *found = asyncio.run(_store_op(path, args.op, out))
            counts = (found[0], _written_messages(out) if args.op == "export_all_to" else found[1])
            times.append(seconds)
        if traced:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({
        "op": args.op, "seconds": statistics.median(times), "sessions": counts[0], "messages": counts[1],
        "peak_heap": peak, "rss_growth": (rss - base_rss) * 1024, "max_rss": rss * 1024,
    }))


def run_child(db: Path, op: str, repeat: int, trace: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--op", op, "--db", str(db), "--repeat", str(repeat)]
    if trace:
        cmd.append("--trace")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=_REPO, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{op} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(db: Path, op: str, repeat: int) -> dict[str, Any]:
    timed = run_child(db, op, repeat, trace=False)
    traced = run_child(db, op, 1, trace=True)
    timed["peak_heap"] = traced["peak_heap"]
    return timed


# ---------------------------------------------------------------------- report


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:9.1f}"


def _row(label: str, r: dict[str, Any], base: dict[str, Any] | None = None, rate: bool = False) -> str:
    ratio = f"{r['seconds'] / base['seconds']:7.2f}x" if base else "   base "
    speed = f"{r['messages'] / r['seconds']:>11,.0f}" if rate else f"{r['sessions']:>11,}"
    return (f"  {label:<34}{r['seconds'] * 1000:10.1f} ms {ratio} {speed}  heap {_mb(r['peak_heap'])} MB"
            f"  rss+ {_mb(r['rss_growth'])} MB")


def _check(result: dict[str, Any], sessions: int, messages: int | None = None) -> None:
    if result["sessions"] != sessions or (messages is not None and result["messages"] != messages):
        raise AssertionError(f"{result['op']} returned {result['sessions']} sessions / {result['messages']} "
                             f"messages, expected {sessions} / {messages}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages in the large export store")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per listing contender (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary stores go")
    parser.add_argument("--keep", action="store_true", help="keep the temporary stores")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    parser.add_argument("--skip-list", action="store_true", help="only run the export part")
    parser.add_argument("--skip-export", action="store_true", help="only run the listing part")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--op", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0

    from hermes_state.sqlite.driver import driver_name, sqlite_version_info

    work = Path(tempfile.mkdtemp(prefix="hermes-surface-", dir=args.dir))
    figures: dict[str, Any] = {"python": sys.version.split()[0], "driver": driver_name(),
                               "sqlite": ".".join(map(str, sqlite_version_info())), "cpus": os.cpu_count()}
    print(f"hermes-state surface benchmark: Python {figures['python']}, {figures['driver']} "
          f"(SQLite {figures['sqlite']}), {figures['cpus']} CPUs; every contender in its own subprocess")
    try:
        if not args.skip_list:
            db = work / "list.db"
            t0 = time.perf_counter()
            shape = build_listing_store(db)
            print(f"\n(L) list_sessions_rich over {shape['sessions']:,} sessions ({shape['listable']:,} listable, "
                  f"{shape['messages']:,} messages; built in {time.perf_counter() - t0:.1f} s), median of "
                  f"{args.repeat}; columns: time, ratio to its baseline, rows, peak Python heap, max RSS growth")
            results = {op: measure(db, op, args.repeat) for op in (
                "floor_page", "list_page", "list_page_last_active", "floor_all", "list_all", "count_listable")}
            _check(results["floor_page"], PAGE)
            _check(results["list_page"], PAGE)
            _check(results["list_page_last_active"], PAGE)
            _check(results["floor_all"], shape["sessions"])
            _check(results["list_all"], shape["listable"])
            _check(results["count_listable"], shape["listable"])
            print(_row("baseline: SELECT * page (sync)", results["floor_page"]))
            print(_row("list_sessions_rich(limit=50)", results["list_page"], results["floor_page"]))
            print(_row("  ... order_by_last_active=True", results["list_page_last_active"], results["floor_page"]))
            print(_row("baseline: SELECT * all rows (sync)", results["floor_all"]))
            print(_row("list_sessions_rich(limit=10000)", results["list_all"], results["floor_all"]))
            print(_row("session_count(exclude_children)", results["count_listable"], results["floor_page"]))
            figures["list"] = {"shape": shape, "results": results}

        if not args.skip_export:
            sizes = [args.messages, max(EXPORT_SESSION_SIZE, args.messages // 4)]
            figures["export"] = {}
            for total in sizes:
                db = work / f"export-{total}.db"
                t0 = time.perf_counter()
                shape = build_export_store(db, total)
                size = db.stat().st_size
                print(f"\n(E) export of {shape['messages']:,} messages in {shape['sessions']:,} sessions "
                      f"({size / 1e6:.0f} MB file, built in {time.perf_counter() - t0:.1f} s); columns: time, "
                      "ratio to export_all, messages/s, peak Python heap, max RSS growth")
                results = {op: measure(db, op, 1) for op in ("export_all", "iter_export_all", "export_all_to")}
                for result in results.values():
                    _check(result, shape["sessions"], shape["messages"])
                base = results["export_all"]
                print(_row("baseline: export_all() -> list", base, rate=True))
                print(_row("iter_export_all() (streaming)", results["iter_export_all"], base, rate=True))
                print(_row("export_all_to(path) (JSON Lines)", results["export_all_to"], base, rate=True))
                heap = {op: r["peak_heap"] for op, r in results.items()}
                print(f"  peak heap, list / streaming: iter {heap['export_all'] / heap['iter_export_all']:.0f}x, "
                      f"jsonl {heap['export_all'] / heap['export_all_to']:.0f}x")
                figures["export"][str(total)] = {"shape": shape, "file_bytes": size, "results": results}
            if len(figures["export"]) == 2:
                big, small = (figures["export"][str(n)]["results"] for n in sizes)
                print(f"\n  memory vs store size ({sizes[1]:,} -> {sizes[0]:,} messages, "
                      f"{sizes[0] / sizes[1]:.0f}x more):")
                for op in ("export_all", "iter_export_all", "export_all_to"):
                    print(f"    {op:<18} peak heap {_mb(small[op]['peak_heap'])} -> {_mb(big[op]['peak_heap'])} MB"
                          f"  ({big[op]['peak_heap'] / small[op]['peak_heap']:.2f}x)")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        if args.keep:
            print(f"\nstores kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
