"""Appends per second for 1, 4 and 8 worker processes sharing one PostgreSQL database (issue 12 report).

Every worker is its own OS process with its own ``hermes_state.postgres.SessionDB``
(one writer connection plus its read pool) and many agents: asyncio tasks
that each append to their own session, awaiting every append (each returns
after its COMMIT), and read their latest messages every few appends so the
read pool sees checkouts. All workers of a round start together and run for
the same wall time; then the parent checks that the database holds exactly
the rows the workers were acknowledged for, with matching counters.

Reported per round (all workers together):

  appends/s          acknowledged appends / wall time of the round
  append p50/p99     latency of one awaited ``append_message`` (enqueue -> COMMIT -> result)
  commit p50/p99     the store's own commit latency (``writer_stats()``) when the store has it,
                     else the time of each batch transaction (BEGIN .. COMMIT) measured here
  checkout p50/p99   time to check a read connection out of the pool (wait, ping, connect)
  batch mean         commands per batch transaction

    python3 bench/postgres_workers.py                          # 1, 4, 8 workers, 5 s each
    python3 bench/postgres_workers.py --workers 1 2 --seconds 2 --agents 10
    python3 bench/postgres_workers.py --json bench/out/workers.json --markdown

The server comes from ``--dsn``, else ``HERMES_TEST_POSTGRES_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``; the run uses one fresh schema,
dropped afterwards. Pool options come from ``--pool-size``/``--max-overflow``
(written to the workers' profile ``config.yaml``); a round opens at most
workers x (pool_size + max_overflow + 1) connections (the 1 is each store's
writer connection).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from bench.append import make_texts  # noqa: E402
from bench.append_postgres import admin_dsn, store_dsn  # noqa: E402

READ_EVERY = 5  # an agent reads its latest messages after every this many appends


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by nearest rank; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- one worker process

def _instrument() -> dict[str, list[float]]:
    """Time pool checkouts and batch transactions in this process; returns the sample lists."""
    from hermes_state.postgres import backend, pool

    samples: dict[str, list[float]] = {"checkout": [], "batch": [], "batch_size": []}
    checkout = pool.ConnectionPool._checkout
    apply = backend.apply_batch

    async def timed_checkout(self: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await checkout(self)
        finally:
            samples["checkout"].append(time.perf_counter() - t0)

    async def timed_apply(conn: Any, commands: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await apply(conn, commands, *args, **kwargs)
        finally:
            samples["batch"].append(time.perf_counter() - t0)
            samples["batch_size"].append(len(commands))

    pool.ConnectionPool._checkout = timed_checkout  # type: ignore[method-assign]
    backend.apply_batch = timed_apply  # type: ignore[assignment]
    return samples


async def _worker(dsn: str, prefix: str, agents: int, seconds: float, start_at: float) -> dict[str, Any]:
    from hermes_state.postgres import SessionDB

    samples = _instrument()
    texts = make_texts(200, hash(prefix) & 0xFFFF)
    db = SessionDB(dsn)
    acknowledged: dict[str, int] = {}
    latencies: list[float] = []
    try:
        sessions = [f"{prefix}-{i:03d}" for i in range(agents)]
        for sid in sessions:  # untimed: sessions exist and the store is open before the start
            await db.create_session(sid, "bench", model="m")
        await db.get_messages(sessions[0], limit=1)
        for key in samples:
            samples[key].clear()
        await asyncio.sleep(max(0.0, start_at - time.time()))
        stop = time.time() + seconds

        async def agent(sid: str) -> None:
            n = 0
            while time.time() < stop:
                t0 = time.perf_counter()
                await db.append_message(sid, "user" if n % 2 == 0 else "assistant", texts[n % len(texts)])
                latencies.append(time.perf_counter() - t0)
                n += 1
                if n % READ_EVERY == 0:
                    await db.get_messages(sid, limit=3, latest=True)
            acknowledged[sid] = n

        began = time.time()
        await asyncio.gather(*(agent(sid) for sid in sessions))
        ended = time.time()
        stats = db.writer_stats() if hasattr(db, "writer_stats") else None
        if inspect.isawaitable(stats):  # async on the facade; a sync twin exists on some branches
            stats = await stats
    finally:
        await db.close()
    return {
        "began": began, "ended": ended, "acknowledged": acknowledged, "append": latencies,
        "checkout": samples["checkout"], "batch": samples["batch"], "batch_size": samples["batch_size"],
        "writer_stats": stats,
    }


def _worker_main(args: tuple[str, str, str, int, float, float], results: Any) -> None:
    dsn, home, prefix, agents, seconds, start_at = args
    os.environ["HERMES_HOME"] = home
    try:
        results.put((prefix, asyncio.run(_worker(dsn, prefix, agents, seconds, start_at))))
    except BaseException as exc:  # reported by the parent, which fails the run
        results.put((prefix, {"error": f"{type(exc).__name__}: {exc}"}))


# --------------------------------------------------------------------------- rounds

def run_round(dsn: str, home: str, workers: int, agents: int, seconds: float) -> dict[str, Any]:
    """Start ``workers`` processes together; returns their merged figures."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    tag = uuid.uuid4().hex[:6]
    start_at = time.time() + 3.0 + 0.5 * workers  # time for every process to import, connect and create sessions
    procs = [
        ctx.Process(target=_worker_main, args=((dsn, home, f"w{workers}-{tag}-{i}", agents, seconds, start_at), results))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    parts = dict(results.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    errors = {k: v["error"] for k, v in parts.items() if "error" in v}
    if errors:
        raise RuntimeError(f"worker(s) failed: {errors}")
    merged: dict[str, Any] = {"workers": workers, "agents_per_worker": agents}
    for key in ("append", "checkout", "batch", "batch_size"):
        merged[key] = [x for part in parts.values() for x in part[key]]
    merged["acknowledged"] = {sid: n for part in parts.values() for sid, n in part["acknowledged"].items()}
    merged["wall"] = max(p["ended"] for p in parts.values()) - min(p["began"] for p in parts.values())
    merged["writer_stats"] = [p["writer_stats"] for p in parts.values() if p["writer_stats"] is not None]
    return merged


async def verify(admin: str, schema: str, acknowledged: dict[str, int]) -> list[str]:
    """Rows and counters of every session against what its agent was acknowledged for."""
    import asyncpg

    conn = await asyncpg.connect(admin, server_settings={"search_path": schema})
    try:
        rows = await conn.fetch(
            "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m WHERE m.session_id = s.id) "
            "FROM sessions s WHERE s.id = ANY($1::text[])", list(acknowledged),
        )
    finally:
        await conn.close()
    found = {r[0]: (r[1], r[2]) for r in rows}
    problems = []
    for sid, n in acknowledged.items():
        counter, count = found.get(sid, (None, None))
        if counter != n or count != n:
            problems.append(f"{sid}: acknowledged {n}, rows {count}, message_count {counter}")
    return problems


def summarise(merged: dict[str, Any]) -> dict[str, Any]:
    total = sum(merged["acknowledged"].values())
    ms = lambda values, q: None if not values else percentile(values, q) * 1000  # noqa: E731
    commit_source = "batch transaction (measured here)"
    commit = (ms(merged["batch"], 0.5), ms(merged["batch"], 0.99))
    stats = merged["writer_stats"]
    if stats:  # the store's own figures, averaged over the workers
        p50 = [s.get("commit_latency_p50_ms") for s in stats if isinstance(s, dict)]
        p99 = [s.get("commit_latency_p99_ms") for s in stats if isinstance(s, dict)]
        if all(isinstance(v, (int, float)) for v in p50 + p99) and p50:
            commit = (sum(p50) / len(p50), sum(p99) / len(p99))
            commit_source = "writer_stats()"
    sizes = merged["batch_size"]
    return {
        "workers": merged["workers"], "agents": merged["workers"] * merged["agents_per_worker"],
        "appends": total, "seconds": merged["wall"], "appends_per_s": total / merged["wall"],
        "append_p50_ms": ms(merged["append"], 0.5), "append_p99_ms": ms(merged["append"], 0.99),
        "commit_p50_ms": commit[0], "commit_p99_ms": commit[1], "commit_source": commit_source,
        "checkout_p50_ms": ms(merged["checkout"], 0.5), "checkout_p99_ms": ms(merged["checkout"], 0.99),
        "checkouts": len(merged["checkout"]), "batches": len(sizes),
        "batch_mean": sum(sizes) / len(sizes) if sizes else None,
    }


def table(rows: list[dict[str, Any]], markdown: bool) -> list[str]:
    cols = [("workers", "workers", "{}"), ("agents", "agents", "{}"), ("appends/s", "appends_per_s", "{:,.0f}"),
            ("append p50 ms", "append_p50_ms", "{:.1f}"), ("append p99 ms", "append_p99_ms", "{:.1f}"),
            ("commit p50 ms", "commit_p50_ms", "{:.1f}"), ("commit p99 ms", "commit_p99_ms", "{:.1f}"),
            ("checkout p50 ms", "checkout_p50_ms", "{:.2f}"), ("checkout p99 ms", "checkout_p99_ms", "{:.2f}"),
            ("cmds/batch", "batch_mean", "{:.1f}")]
    cells = [[fmt.format(r[key]) if r[key] is not None else "n/a" for _, key, fmt in cols] for r in rows]
    heads = [h for h, _, _ in cols]
    if markdown:
        return ["| " + " | ".join(heads) + " |", "|" + "|".join("---:" for _ in heads) + "|",
                *("| " + " | ".join(c) + " |" for c in cells)]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    return ["  ".join(h.rjust(w) for h, w in zip(heads, widths)),
            *("  ".join(v.rjust(w) for v, w in zip(c, widths)) for c in cells)]


async def _schema(admin: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=None, help="postgresql:// URL of the server")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 4, 8], help="worker counts, one round each")
    p.add_argument("--agents", type=int, default=25, help="agents (sessions) per worker (default 25)")
    p.add_argument("--seconds", type=float, default=5.0, help="wall time of each round (default 5)")
    p.add_argument("--pool-size", type=int, default=2, help="database.postgres.pool_size of every worker")
    p.add_argument("--max-overflow", type=int, default=2, help="database.postgres.max_overflow of every worker")
    p.add_argument("--json", default=None, metavar="OUT", help="write every figure to this JSON file")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = p.parse_args(argv)
    if min(args.workers) < 1 or args.agents < 1 or args.seconds <= 0:
        p.error("--workers, --agents and --seconds must be positive")

    import asyncpg

    from hermes_state.postgres import SessionDB

    admin = admin_dsn(args.dsn)
    schema = f"hs_bench_{uuid.uuid4().hex}"
    dsn = store_dsn(admin, schema)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-workers-") as home:
        Path(home, "config.yaml").write_text(
            f"database:\n  postgres:\n    pool_size: {args.pool_size}\n    max_overflow: {args.max_overflow}\n"
            "    pool_timeout: 30\n", encoding="utf-8",
        )
        os.environ["HERMES_HOME"] = home
        asyncio.run(_schema(admin, f'CREATE SCHEMA "{schema}"'))
        try:
            async def create_tables() -> tuple[str, str]:
                async with SessionDB(dsn) as db:  # the schema exists before the workers race for it
                    info = await db.storage_info()
                conn = await asyncpg.connect(admin)
                try:
                    return info["server_version"], await conn.fetchval("SHOW synchronous_commit")
                finally:
                    await conn.close()

            server, sync_commit = asyncio.run(create_tables())
            print(f"hermes-state worker benchmark (PostgreSQL {server}, synchronous_commit={sync_commit}): "
                  f"python={platform.python_version()} cpus={os.cpu_count()} agents/worker={args.agents} "
                  f"seconds/round={args.seconds} pool_size={args.pool_size} max_overflow={args.max_overflow} "
                  f"(a round opens at most workers x {args.pool_size + args.max_overflow + 1} connections)")
            sys.stdout.flush()
            for workers in args.workers:
                merged = run_round(dsn, home, workers, args.agents, args.seconds)
                found = asyncio.run(verify(admin, schema, merged["acknowledged"]))
                problems += [f"{workers} workers: {x}" for x in found]
                rows.append(summarise(merged))
                print(f"  {workers} worker(s): {rows[-1]['appends_per_s']:,.0f} appends/s"
                      + ("" if not found else f", {len(found)} PROBLEM(S)"))
                sys.stdout.flush()
        finally:
            asyncio.run(_schema(admin, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    print()
    print("\n".join(table(rows, args.markdown)))
    sources = sorted({r["commit_source"] for r in rows})
    print(f"\ncommit latency source: {', '.join(sources)}")
    print("row checks: " + ("every acknowledged append is stored once, counters match" if not problems else "PROBLEMS"))
    for line in problems[:20]:
        print("  " + line)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rows, "problems": problems}, indent=2) + "\n")
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
