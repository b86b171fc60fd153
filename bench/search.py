"""``search_messages`` latency on a large store, idle and while 20 writers append.

The store: ``--messages`` messages (default 1,000,000) over ``--messages/100``
sessions, generated text with a Zipf word distribution (a few hundred common
English and technical words, a long tail of 30,000 rarer words), recurring
two-word collocations, some snake_case/path tokens, tool rows, and CJK text
in about 3% of the messages. It is built once through the public API
(``append_messages_batch``, 100 messages per session, many sessions in
flight so the writer commits big groups) and cached under ``bench/out/``;
every run works on a fresh copy.

Query classes (``limit=20``, default relevance order): single terms of
middling frequency, very common terms, two-word phrases, prefix queries, a
CJK query and zero-hit queries (which take the trigram fallback). Each class
is timed in three phases on the same store:

  idle      no writes (the baseline the other phases are compared with)
  paced     20 writer tasks each append a message every ``--interval`` s
  flat-out  20 writer tasks append back to back (saturating the writer)

plus the ``floor``: the bare FTS5 statement (``MATCH ... ORDER BY rank
LIMIT 20``, no joins, snippets or context) on a plain connection, for the
classes answered by ``messages_fts``.

"Reads never wait for a write batch": every write batch's start and end is
recorded; the report counts searches that ran while a batch was in flight
and compares their latency with the batches' own duration.

Two more suites share this entry point (see their modules):

  --suite zipf   realistic text (issue 14): 100 x 1,000 Zipf messages, 10
                 writers, p95 per query class against its bare statement
                 (``bench/search_zipf.py``)
  --suite stall  a 2.9 MB message with 80,000 hits (issue 10): get_messages
                 p95 while 4 pathological searches run, and their deadline
                 (``bench/search_stall.py``)

Run from the repository root::

    python3 bench/search.py --suite zipf
    python3 bench/search.py --suite stall
    python3 bench/search.py                     # 1,000,000 messages (builds the cache once, ~5 min)
    python3 bench/search.py --messages 50000    # quick run
    python3 bench/search.py --cjk               # also build and load the cjk_unicode61 tokenizer
    python3 bench/search.py --json bench/out/search.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from bench.search_workload import COLLOCATIONS, SEED, Corpus, pct  # noqa: E402

GENERATOR_VERSION = 1
WRITERS = 20
TARGET_P95_MS = 25.0

# ---------------------------------------------------------------------- build


def cache_path(out: Path, messages: int, cjk: bool) -> Path:
    return out / f"search-{messages}-s{SEED}-g{GENERATOR_VERSION}{'-cjk' if cjk else ''}.db"


async def build_store(path: Path, messages: int, sessions: int) -> None:
    from hermes_state import SessionDB

    tmp = path.with_suffix(".building")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    corpus = Corpus(SEED)
    db = SessionDB(tmp)
    started = time.perf_counter()
    per = messages // sessions
    base = time.time() - 365 * 86400
    try:
        async def one(s: int) -> None:
            sid = f"bench-{s:06d}"
            await db.create_session(sid, ["cli", "telegram", "discord", "api"][s % 4], model=f"model-{s % 3}")
            t0 = base + s * (365 * 86400 / sessions)
            await db.append_messages_batch(sid, [corpus.message(i, t0 + i * 7.0) for i in range(per)])

        wave = 64
        for first in range(0, sessions, wave):
            await asyncio.gather(*(one(s) for s in range(first, min(first + wave, sessions))))
            done = min(first + wave, sessions) * per
            if first % (wave * 20) == 0:
                rate = done / max(1e-9, time.perf_counter() - started)
                print(f"  built {done:>9,} messages  ({rate:,.0f}/s)", flush=True)
    finally:
        await db.close()
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{tmp}{suffix}")
        if src.exists():
            src.replace(Path(f"{path}{suffix}"))
    print(f"  store built in {time.perf_counter() - started:.0f} s: {path} ({path.stat().st_size / 2**20:,.0f} MiB)")


def build_cjk_library(out: Path) -> Path | None:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return None
    lib = out / "libfts5_cjk.so"
    src = _REPO / "native" / "fts5_cjk" / "fts5_cjk.c"
    done = subprocess.run([compiler, "-O2", "-fPIC", "-shared", str(src), "-o", str(lib)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  could not build the CJK tokenizer: {done.stderr.strip()[:200]}")
        return None
    return lib


# -------------------------------------------------------------------- queries


def pick_queries(corpus: Corpus) -> dict[str, list[str]]:
    """Query classes, chosen deterministically from the vocabulary the corpus was drawn from."""
    rng = random.Random(SEED + 7)
    vocab = corpus.vocab
    mid = [w for w in vocab[150:2500] if len(w) >= 4]
    return {
        "term": rng.sample(mid, 8),
        "term-common": ["error", "file", "docker"],
        "phrase": [f'"{a} {b}"' for a, b in rng.sample(COLLOCATIONS, 6)],
        "prefix": [w[:4] + "*" for w in rng.sample(mid, 6)],
        "cjk": ["数据库连接", "設定ファイル", "部署到生产"],
        "cjk-short": ["서버 오류", "错误"],
        "zero-hit": ["xylophonist", "qwertzuiop", "kubernetesqx"],
    }


class Timer:
    """Records every write batch (start, end) so searches can be matched against them."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, float, int]] = []
        self.inflight = 0

    def wrap(self, actor: Any) -> None:
        apply = actor._apply

        async def timed(commands: Any) -> Any:
            start = time.perf_counter()
            self.inflight += 1
            try:
                return await apply(commands)
            finally:
                self.inflight -= 1
                self.batches.append((start, time.perf_counter(), len(commands)))

        actor._apply = timed


async def time_searches(db: Any, queries: dict[str, list[str]], rounds: int, seed: int) -> dict[str, Any]:
    schedule = [(cls, q) for cls, qs in queries.items() for q in qs for _ in range(rounds)]
    random.Random(seed).shuffle(schedule)
    lat: dict[str, list[float]] = {cls: [] for cls in queries}
    hits: dict[str, list[int]] = {cls: [] for cls in queries}
    spans: list[tuple[float, float, str]] = []
    for cls, q in schedule:
        start = time.perf_counter()
        found = await db.search_messages(q, limit=20)
        end = time.perf_counter()
        lat[cls].append((end - start) * 1000)
        hits[cls].append(len(found))
        spans.append((start, end, cls))
        await asyncio.sleep(0)
    return {"lat": lat, "hits": hits, "spans": spans}


async def writer(db: Any, n: int, stop: asyncio.Event, interval: float, out: list[float]) -> None:
    corpus = Corpus(SEED + 100 + n)
    sid = f"writer-{n:02d}-{os.getpid()}-{time.time_ns()}"
    await db.create_session(sid, "bench-writer")
    i = 0
    while not stop.is_set():
        msg = corpus.message(i, time.time())
        start = time.perf_counter()
        await db.append_message(sid, msg["role"], msg["content"], tool_name=msg.get("tool_name"))
        out.append((time.perf_counter() - start) * 1000)
        i += 1
        if interval > 0:
            await asyncio.sleep(interval)


async def loaded_phase(db: Any, queries: dict[str, list[str]], rounds: int, interval: float, timer: Timer) -> dict[str, Any]:
    stop = asyncio.Event()
    appends: list[float] = []
    tasks = [asyncio.create_task(writer(db, n, stop, interval, appends)) for n in range(WRITERS)]
    await asyncio.sleep(1.0)  # let the writers reach a steady state
    first_batch = len(timer.batches)
    started = time.perf_counter()
    result = await time_searches(db, queries, rounds, SEED + int(interval * 1000) + 1)
    elapsed = time.perf_counter() - started
    stop.set()
    await asyncio.gather(*tasks)
    batches = [b for b in timer.batches[first_batch:] if b[0] >= started]
    result.update(
        appends=len(appends),
        append_rate=len(appends) / elapsed,
        append_p50=pct(appends, 50),
        append_p95=pct(appends, 95),
        batches=batches,
    )
    return result


async def long_batch_phase(db: Any, queries: dict[str, list[str]], timer: Timer, rows: int) -> dict[str, Any]:
    """Searches while one big write transaction is in flight (it commits only at its end)."""
    corpus = Corpus(SEED + 999)
    sid = f"long-batch-{os.getpid()}"
    await db.create_session(sid, "bench-writer")
    payload = [corpus.message(i, time.time()) for i in range(rows)]
    first = len(timer.batches)
    write = asyncio.create_task(db.append_messages_batch(sid, payload))
    while len(timer.batches) == first and not write.done() and not _in_flight(timer):
        await asyncio.sleep(0.001)
    flat = [q for cls in ("term", "phrase", "prefix", "cjk") for q in queries[cls]]
    lat: list[float] = []
    i = 0
    while not write.done():
        start = time.perf_counter()
        await db.search_messages(flat[i % len(flat)], limit=20)
        if not write.done():
            lat.append((time.perf_counter() - start) * 1000)
        i += 1
    await write
    if len(timer.batches) == first:  # no batch was seen through the wrapped apply: no duration to report
        timer.batches.append((float("nan"), float("nan"), rows))
    start, end, _ = timer.batches[-1]
    return {"rows": rows, "batch_ms": (end - start) * 1000, "searches": len(lat), "p50": pct(lat, 50),
            "p95": pct(lat, 95), "max": max(lat) if lat else float("nan")}


def _in_flight(timer: Timer) -> bool:
    return timer.inflight > 0


def floor_latencies(path: Path, queries: dict[str, list[str]], rounds: int, cjk_lib: Path | None) -> dict[str, list[float]]:
    """The bare FTS5 statement per query (no joins, snippet or context), on a plain connection."""
    from hermes_state.sqlite.driver import driver_module
    from hermes_state.search_text.sanitize import sanitize_fts5_query

    conn = driver_module().connect(f"file:{path}?mode=ro", uri=True)
    out: dict[str, list[float]] = {}
    try:
        for cls in ("term", "term-common", "phrase", "prefix"):
            for q in queries[cls]:
                match = sanitize_fts5_query(q)
                for _ in range(rounds):
                    start = time.perf_counter()
                    conn.execute(
                        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20", (match,)
                    ).fetchall()
                    out.setdefault(cls, []).append((time.perf_counter() - start) * 1000)
    finally:
        conn.close()
    return out


def overlap_report(result: dict[str, Any]) -> dict[str, Any]:
    """Searches that ran while a write batch was in flight, and how long those batches took."""
    batches = result["batches"]
    overlapping: list[float] = []
    for start, end, _cls in result["spans"]:
        if any(b[0] < end and b[1] > start for b in batches):
            overlapping.append((end - start) * 1000)
    durations = [(b[1] - b[0]) * 1000 for b in batches]
    sizes = [b[2] for b in batches]
    return {
        "searches": len(result["spans"]),
        "overlapping": len(overlapping),
        "overlapping_p95_ms": pct(overlapping, 95),
        "batch_count": len(batches),
        "batch_p50_ms": pct(durations, 50),
        "batch_p95_ms": pct(durations, 95),
        "batch_max_ms": max(durations) if durations else float("nan"),
        "batch_mean_size": statistics.fmean(sizes) if sizes else float("nan"),
    }


# ---------------------------------------------------------------------- main


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from hermes_state import SessionDB

    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    cjk_lib = build_cjk_library(out) if args.cjk else None
    if args.cjk and cjk_lib is None:
        print("  CJK tokenizer unavailable; running without it")
    home = Path(tempfile.mkdtemp(prefix="hermes-bench-home-"))
    os.environ["HERMES_HOME"] = str(home)
    os.environ["HERMES_SEARCH_SLOW_MS"] = "1e12"
    if cjk_lib is not None:
        os.environ["HERMES_FTS5_CJK_SO"] = str(cjk_lib)
    else:
        os.environ.pop("HERMES_FTS5_CJK_SO", None)

    sessions = max(1, args.messages // 100)
    cached = cache_path(out, args.messages, cjk_lib is not None)
    if args.rebuild or not cached.exists():
        print(f"building the store: {args.messages:,} messages over {sessions:,} sessions")
        await build_store(cached, args.messages, sessions)
        if cjk_lib is not None:
            db = SessionDB(cached)
            try:
                while await db.fts_cjk_rebuild_step():
                    pass
            finally:
                await db.close()
    work = out / f"work-{os.getpid()}.db"
    shutil.copyfile(cached, work)
    try:
        corpus = Corpus(SEED)
        queries = pick_queries(corpus)
        floor = floor_latencies(work, queries, args.rounds, cjk_lib)
        db = SessionDB(work)
        timer = Timer()
        report: dict[str, Any] = {"queries": queries}
        try:
            await db.storage_info()
            timer.wrap(db._actor)
            # Warm the page cache the way a long-running store would have it.
            await time_searches(db, queries, 1, SEED)
            report["idle"] = await time_searches(db, queries, args.rounds, SEED + 1)
            report["paced"] = await loaded_phase(db, queries, args.rounds, args.interval, timer)
            report["flat-out"] = await loaded_phase(db, queries, args.rounds, 0.0, timer)
            report["long-batch"] = await long_batch_phase(db, queries, timer, max(2000, args.messages // 20))
            report["storage"] = await db.storage_info()
            report["messages_after"] = await db.message_count()
        finally:
            await db.close()
        report["floor"] = floor
        report["cjk"] = cjk_lib is not None
        return report
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)


def print_report(args: argparse.Namespace, report: dict[str, Any]) -> bool:
    info = report["storage"]
    print()
    print(f"search_messages, limit=20: {args.messages:,} messages / {max(1, args.messages // 100):,} sessions, "
          f"{WRITERS} writers; {platform.python_implementation()} {platform.python_version()}, "
          f"{info['driver']} SQLite {info['sqlite_version']}, {os.cpu_count()} CPUs, "
          f"CJK tokenizer {'loaded' if report['cjk'] else 'absent'}")
    print(f"rounds per query: {args.rounds}; paced writers: one append per {args.interval * 1000:.0f} ms each")
    print()
    head = (f"{'class':<12} {'hits':>5} {'floor p50':>9} | {'idle p50':>8} {'p95':>7} {'x floor':>7} | {'paced p50':>9} "
            f"{'p95':>7} {'x idle':>6} | {'flat p50':>8} {'p95':>7} {'x idle':>6}")
    print(head)
    print("-" * len(head))
    ok = True
    for cls in report["queries"]:
        idle = report["idle"]["lat"][cls]
        paced = report["paced"]["lat"][cls]
        flat = report["flat-out"]["lat"][cls]
        floor = report["floor"].get(cls)
        hits = statistics.fmean(report["idle"]["hits"][cls])
        ratio = f"{pct(idle, 50) / pct(floor, 50):.2f}" if floor else "-"
        print(
            f"{cls:<12} {hits:>5.1f} {(f'{pct(floor, 50):.2f}' if floor else '-'):>9} | "
            f"{pct(idle, 50):>8.2f} {pct(idle, 95):>7.2f} {ratio:>7} | {pct(paced, 50):>9.2f} {pct(paced, 95):>7.2f} "
            f"{pct(paced, 95) / pct(idle, 95):>6.2f} | {pct(flat, 50):>8.2f} {pct(flat, 95):>7.2f} "
            f"{pct(flat, 95) / pct(idle, 95):>6.2f}"
        )
    print("(milliseconds; floor = the bare FTS5 statement MATCH ... ORDER BY rank LIMIT 20 on a plain connection;")
    print(" 'x floor' = store idle p50 / floor p50; 'x idle' = p95 under load / p95 idle)")
    print()
    fts_classes = ("term", "phrase", "prefix")
    for phase in ("idle", "paced", "flat-out"):
        worst = max(pct(report[phase]["lat"][c], 95) for c in fts_classes)
        verdict = "meets" if worst < TARGET_P95_MS else "MISSES"
        ok &= worst < TARGET_P95_MS
        print(f"{phase:<8} worst FTS5-route p95 (term, phrase, prefix) = {worst:6.2f} ms -> {verdict} the {TARGET_P95_MS:.0f} ms target")
    for phase in ("paced", "flat-out"):
        r = report[phase]
        o = overlap_report(r)
        print(
            f"{phase:<8} writers: {r['appends']:,} appends ({r['append_rate']:,.0f}/s), append p50 {r['append_p50']:.1f} ms "
            f"p95 {r['append_p95']:.1f} ms; {o['batch_count']:,} batches (mean {o['batch_mean_size']:.1f} commands, "
            f"p50 {o['batch_p50_ms']:.1f} ms, p95 {o['batch_p95_ms']:.1f} ms, max {o['batch_max_ms']:.1f} ms)"
        )
        print(
            f"{'':<8} {o['overlapping']}/{o['searches']} searches overlapped a committing batch; their p95 "
            f"{o['overlapping_p95_ms']:.2f} ms"
        )
    long = report["long-batch"]
    print(
        f"long     one append_messages_batch of {long['rows']:,} rows held the writer for {long['batch_ms']:,.0f} ms; "
        f"{long['searches']} searches completed meanwhile, p50 {long['p50']:.2f} ms, p95 {long['p95']:.2f} ms, "
        f"max {long['max']:.2f} ms (a read that waited for the commit would take up to {long['batch_ms']:,.0f} ms)"
    )
    print(f"messages after the run: {report['messages_after']:,}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="store size (default 1,000,000)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed runs of each query per phase (default 10; the SQLite zipf suite 30)"
    )
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between a paced writer's appends")
    parser.add_argument("--cjk", action="store_true", help="build and load the cjk_unicode61 tokenizer")
    parser.add_argument("--dir", default=str(_REPO / "bench" / "out"), help="cache and work directory")
    parser.add_argument("--rebuild", action="store_true", help="regenerate the cached store")
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--suite", choices=("large", "zipf", "stall"), default="large", help="which benchmark (default large)")
    parser.add_argument("--reads", type=int, default=200, help="stall: get_messages calls per phase")
    parser.add_argument("--cpu-rounds", type=int, default=0, help="zipf: also time each side's reader-thread CPU, this many rounds")
    parser.add_argument("--deadline-ms", type=float, default=10000.0, help="stall: sessions.search_timeout_ms")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite", help="postgres: bench/search_postgres.py")
    parser.add_argument("--dsn", help="postgres: server DSN (default $HERMES_TEST_POSTGRES_DSN)")
    args = parser.parse_args()
    if args.rounds is None:
        # The zipf suite's p95 per class comes from 4-8 queries x rounds samples:
        # at 10 rounds it is the second or third slowest of 40-80, mostly noise.
        args.rounds = 30 if args.suite == "zipf" and args.backend == "sqlite" else 10
    if args.backend == "postgres":
        from bench import search_postgres

        return search_postgres.main(args)
    if args.suite != "large":
        return run_suite(args)
    report = asyncio.run(run(args))
    ok = print_report(args, report)
    if args.json:
        slim = {k: v for k, v in report.items() if k not in ("paced", "flat-out", "idle", "floor")}
        for phase in ("idle", "paced", "flat-out"):
            r = report[phase]
            slim[phase] = {
                "p50": {c: pct(v, 50) for c, v in r["lat"].items()},
                "p95": {c: pct(v, 95) for c, v in r["lat"].items()},
            }
            if phase != "idle":
                slim[phase]["writers"] = {k: r[k] for k in ("appends", "append_rate", "append_p50", "append_p95")}
                slim[phase]["overlap"] = overlap_report(r)
        slim["floor"] = {c: {"p50": pct(v, 50), "p95": pct(v, 95)} for c, v in report["floor"].items()}
        Path(args.json).write_text(json.dumps(slim, indent=2, default=str))
    return 1 if args.check and not ok else 0


def run_suite(args: argparse.Namespace) -> int:
    """Run the zipf or stall suite; returns the exit status."""
    if args.suite == "zipf":
        from bench import search_zipf as suite
    else:
        from bench import search_stall as suite  # type: ignore[no-redef]
    data = asyncio.run(suite.run(args))
    ok, summary = suite.report(args, data)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
