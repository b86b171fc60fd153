"""Append/read throughput of the PostgreSQL ``SessionDB`` against a naive baseline and a ``COPY`` limit.

The shapes of ``bench/append.py`` (counts at ``--scale 1``):

  (a) 50 tasks x 200 awaited ``append_message`` calls, each task its own session
  (b) one task, 5,000 awaited ``append_message`` calls
  (c) ``append_messages_batch`` of 10,000 messages
  (d) ``get_messages`` of a 10,000-message session (the one written by (c))

Contenders, each shape in a fresh schema of its own (the store's tables and
indexes, the GIN search index included), dropped afterwards:

  store  ``hermes_state.postgres.SessionDB`` (each await returns after its COMMIT)
  naive  what the reference does: an asyncpg pool of ``pool_size + max_overflow``
         (15) connections, one transaction per awaited append: lock the session
         row (``FOR UPDATE``), ``INSERT ... RETURNING id``, update the counters;
         (c) one transaction doing that per row; (d) ``SELECT`` -> dicts
  limit  ``COPY`` of the same rows into the same table (``copy_records_to_table``)
         plus the counter update, one transaction; (d) a plain ``SELECT`` of the
         same rows decoded into the dicts ``get_messages`` returns
  limit per group  (a) only: the same ``COPY`` in one transaction per group of 50
         rows (one row of each task), the most a group commit can hold when 50
         tasks each await one append: the floor for any write path whose awaits
         return after their COMMIT (200 commits, each an fsync)

Targets: (a) store >= 5x naive; (c) store >= 50% of the COPY limit.
``--check`` exits 1 when a target fails. After the targets the report prints
the ceilings of (a): what each limit achieves against naive, and the store
against the per-group limit (5x needs a limit >= 5x naive).

    python3 bench/append.py --backend postgres               # full run
    python3 bench/append_postgres.py --scale 0.1 --repeat 1  # smoke run
    python3 bench/append_postgres.py --dsn postgresql://postgres@127.0.0.1:5432/test --check

The server comes from ``--dsn``, else ``HERMES_TEST_POSTGRES_DSN``, else the
local default above (a ``postgresql://`` URL; the store gets the same server
with ``+asyncpg``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from bench.append_workload import ROLE, Workload, run_async_contender, shape_items

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
NAIVE_POOL = 15  # the reference's defaults: pool_size 5 + max_overflow 10

LOCK_SQL = "SELECT id FROM sessions WHERE id = $1 FOR UPDATE"
INSERT_SQL = (
    'INSERT INTO messages (session_id, role, content, "timestamp", observed) VALUES ($1, $2, $3, $4, 0) RETURNING id'
)
COUNT_SQL = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + $1, "
    "tool_call_count = COALESCE(tool_call_count, 0) + 0 WHERE id = $2"
)
SESSION_SQL = "INSERT INTO sessions (id, source, model, started_at) VALUES ($1, 'bench', 'm', $2)"
COPY_COLUMNS = ("session_id", "role", "content", "timestamp", "observed")


# --------------------------------------------------------------------------- servers and schemas

def admin_dsn(arg: str | None) -> str:
    """The ``postgresql://`` URL of the server (``--dsn``, the test variable, or the local default)."""
    dsn = (arg or os.environ.get("HERMES_TEST_POSTGRES_DSN") or DEFAULT_DSN).strip()
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if dsn.startswith(prefix):
            dsn = "postgresql://" + dsn[len(prefix):]
    return dsn


def store_dsn(admin: str, schema: str) -> str:
    """The store's URL for ``admin``'s server, pinned to ``schema`` through ``search_path``."""
    from tests.postgres_support import store_dsn as pinned

    return pinned(admin, schema)


class Schemas:
    """Fresh uniquely named schemas, each dropped by :meth:`drop_all` (also after a failure)."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.made: dict[str, str] = {}  # label -> schema name

    async def new(self, label: str, *, with_tables: bool) -> str:
        import asyncpg

        name = f"hs_bench_{uuid.uuid4().hex}"
        conn = await asyncpg.connect(self.admin)
        try:
            await conn.execute(f'CREATE SCHEMA "{name}"')
            self.made[label] = name
            if with_tables:  # the store's own DDL, so every contender pays for the same indexes
                from hermes_state.postgres.migration import ensure_schema

                await conn.execute(f'SET search_path TO "{name}"')
                await ensure_schema(conn)
        finally:
            await conn.close()
        return name

    async def count(self, label: str) -> tuple[int, int]:
        """(message rows, sum of the sessions' message_count) in the schema of ``label``."""
        import asyncpg

        conn = await asyncpg.connect(self.admin, server_settings={"search_path": self.made[label]})
        try:
            rows = await conn.fetchval("SELECT count(*) FROM messages")
            counted = await conn.fetchval("SELECT COALESCE(sum(message_count), 0) FROM sessions")
            return int(rows), int(counted)
        finally:
            await conn.close()

    async def drop_all(self) -> None:
        import asyncpg

        if not self.made:
            return
        conn = await asyncpg.connect(self.admin)
        try:
            for name in self.made.values():
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
            self.made.clear()
        finally:
            await conn.close()


# --------------------------------------------------------------------------- naive (the reference's path)

class NaivePostgres:
    """A pool of connections, one transaction per awaited write: lock, insert, update the counters."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, admin: str, schema: str) -> NaivePostgres:
        import asyncpg

        pool = await asyncpg.create_pool(
            admin, min_size=0, max_size=NAIVE_POOL, server_settings={"search_path": schema}
        )
        return cls(pool)

    async def create_session(self, sid: str) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(SESSION_SQL, sid, time.time())

    async def _append(self, conn: Any, sid: str, role: str, content: str) -> int:
        await conn.execute(LOCK_SQL, sid)
        new_id = await conn.fetchval(INSERT_SQL, sid, role, content, time.time())
        await conn.execute(COUNT_SQL, 1, sid)
        return int(new_id)

    async def append_message(self, sid: str, role: str, content: str) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            return await self._append(conn, sid, role, content)

    async def append_messages_batch(self, sid: str, messages: list[dict]) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            for m in messages:
                await self._append(conn, sid, m["role"], m["content"])
        return len(messages)

    async def get_messages(self, sid: str) -> list[dict]:
        async with self.pool.acquire() as conn:
            return [dict(r) for r in await conn.fetch("SELECT * FROM messages WHERE session_id = $1 ORDER BY id", sid)]

    async def close(self) -> None:
        await self.pool.close()


# --------------------------------------------------------------------------- limit (COPY, one transaction)

async def copy_limit(admin: str, schemas: Schemas, label: str, sessions: list[str],
                     items: list[tuple[str, int, str]], group: int | None = None) -> float:
    """Seconds to ``COPY`` the rows of one shape (and bump the counters): one transaction, or one per ``group`` rows."""
    import asyncpg

    schema = await schemas.new(label, with_tables=True)
    conn = await asyncpg.connect(admin, server_settings={"search_path": schema})
    try:
        now = time.time()
        await conn.executemany(SESSION_SQL, [(s, now) for s in sessions])
        t0 = time.perf_counter()
        size = group or len(items)
        for start in range(0, len(items), size):
            part = items[start:start + size]
            records = [(sid, ROLE[i % 2], text, time.time(), 0) for sid, i, text in part]
            counts: dict[str, int] = {}
            for sid, _, _ in part:
                counts[sid] = counts.get(sid, 0) + 1
            async with conn.transaction():
                await conn.copy_records_to_table("messages", records=records, columns=COPY_COLUMNS, schema_name=schema)
                await conn.executemany(COUNT_SQL, [(n, sid) for sid, n in counts.items()])
        return time.perf_counter() - t0
    finally:
        await conn.close()


async def plain_read(admin: str, schema: str, sid: str) -> tuple[float, list[dict]]:
    """A warm plain ``SELECT`` of the session's active rows, decoded into the dicts ``get_messages`` returns."""
    import asyncpg

    from hermes_state.encoding import decode_message_row
    from hermes_state.postgres.queries.core import MESSAGE_SELECT, message_dict

    sql = f"SELECT {MESSAGE_SELECT} FROM messages WHERE session_id = $1 AND active = 1 ORDER BY id"
    conn = await asyncpg.connect(admin, server_settings={"search_path": schema})
    try:
        for _ in range(2):  # the first read warms the connection (statement cache, buffers)
            t0 = time.perf_counter()
            out = [decode_message_row(message_dict(r)) for r in await conn.fetch(sql, sid)]
            seconds = time.perf_counter() - t0
        return seconds, out
    finally:
        await conn.close()


# --------------------------------------------------------------------------- one round

async def run_round(
    w: Workload, admin: str, naive: bool, errors: dict[str, str], checks: list[str], keys: str = "abc"
) -> dict[str, dict[str, float]]:
    """Seconds per (contender, shape) of one round; every schema it made is dropped before it returns."""
    from hermes_state.postgres import SessionDB

    schemas = Schemas(admin)
    results: dict[str, dict[str, float]] = {"store": {}, "naive": {}, "copy": {}, "group": {}}
    try:
        for shape in keys:
            sessions, items = shape_items(w, shape)
            results["copy"][shape] = await copy_limit(admin, schemas, f"copy-{shape}", sessions, items)
            if shape == "a":  # interleaved: each group of ``tasks`` rows holds one row of every task
                results["group"][shape] = await copy_limit(admin, schemas, f"group-{shape}", sessions, items, w.tasks)

        # bench/append.py's contender loop names a file per shape; here its stem names a fresh schema.
        async def open_store(path: Path) -> Any:
            return SessionDB(store_dsn(admin, await schemas.new(path.stem, with_tables=False)))

        async def open_naive(path: Path) -> Any:
            return await NaivePostgres.open(admin, await schemas.new(path.stem, with_tables=True))

        results["store"] = await run_async_contender(
            "store", open_store, lambda db, sid: db.create_session(sid, source="bench", model="m"), w, Path(), errors,
            keys,
        )
        if naive:
            results["naive"] = await run_async_contender(
                "naive", open_naive, lambda db, sid: db.create_session(sid), w, Path(), errors, keys
            )
        if "d" in results["store"]:
            seconds, plain = await plain_read(admin, schemas.made["store-c"], "c")
            results["copy"]["d"] = seconds
            db = SessionDB(store_dsn(admin, schemas.made["store-c"]))
            try:
                if await db.get_messages("c") != plain:
                    errors["store:d"] = "get_messages and the plain read returned different dicts"
            finally:
                await db.close()
        expect = {"a": w.rows_a, "b": w.single, "c": w.batch}
        for label in list(schemas.made):
            who, key = label.split("-")
            if key in results.get(who, {}):
                rows, counted = await schemas.count(label)
                if rows != expect[key] or counted != expect[key]:
                    checks.append(f"{label}: rows {rows}, counters {counted}, expected {expect[key]}")
    finally:
        await schemas.drop_all()
    return results


# --------------------------------------------------------------------------- report

SHAPES = {
    "a": "(a) 50 tasks x {per_task} append_message",
    "b": "(b) 1 task x {single} append_message",
    "c": "(c) append_messages_batch of {batch}",
    "d": "(d) get_messages of {batch}",
}
LABELS = {
    "naive": "naive (pool, txn per write)",
    "copy": "limit (COPY, 1 txn)",
    "group": "limit (COPY, 1 txn per 50)",
}
READ_LABELS = {"naive": "naive (SELECT -> dicts)", "copy": "plain SELECT + decode"}
# (shape, reference, minimum store/reference ratio)
TARGETS = [("a", "naive", 5.0), ("c", "copy", 0.5)]


def build_report(w: Workload, results: dict[str, dict[str, float]]) -> tuple[dict, list[str]]:
    """Rows per second per contender and shape, and the table with store/contender ratios."""
    counts = {"a": w.rows_a, "b": w.single, "c": w.batch, "d": w.batch}
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for shape, n in counts.items():
        figures[shape] = {}
        for who in ("store", "naive", "copy", "group"):
            secs = results.get(who, {}).get(shape)
            if secs is not None:
                figures[shape][who] = {"rows": n, "seconds": secs, "rows_per_s": n / secs if secs > 0 else float("inf")}
    head = f"{'shape':<38} {'contender':<28} {'rows':>7} {'seconds':>8} {'rows/s':>10} {'store/this':>10}"
    lines = [head, "-" * len(head)]
    for shape in counts:
        title = SHAPES[shape].format(per_task=w.per_task, single=w.single, batch=w.batch)
        store = figures[shape].get("store")
        labels = READ_LABELS if shape == "d" else LABELS
        for who, label in (("store", "store"), *labels.items()):
            f = figures[shape].get(who)
            left = title if who == "store" else ""
            if f is None and who == "group":  # measured for (a) only
                continue
            if f is None:
                lines.append(f"{left:<38} {label:<28} {'-':>7} {'n/a':>8} {'n/a':>10}")
                continue
            ratio = f"{store['rows_per_s'] / f['rows_per_s']:.2f}x" if store and who != "store" else ""
            lines.append(f"{left:<38} {label:<28} {f['rows']:>7} {f['seconds']:>8.3f} {f['rows_per_s']:>10,.0f} {ratio:>10}")
    return figures, lines


def ceilings(figures: dict) -> list[str]:
    """(a)'s limits against naive, and the store against the per-group limit (the floor it shares)."""
    a = figures.get("a", {})
    naive, store, group = a.get("naive"), a.get("store"), a.get("group")
    lines = []
    if naive:
        for who, label in (("copy", "COPY, 1 txn"), ("group", "COPY, 1 txn per 50")):
            if who in a:
                lines.append(f"  {'limit (' + label + ') / naive':<42} {a[who]['rows_per_s'] / naive['rows_per_s']:>6.2f}x")
    if store and group:
        lines.append(f"  {'store / limit (COPY, 1 txn per 50)':<42} {store['rows_per_s'] / group['rows_per_s']:>6.2f}x")
    return lines


def evaluate_targets(figures: dict) -> list[dict]:
    out = []
    for shape, ref, minimum in TARGETS:
        a, b = figures[shape].get("store"), figures[shape].get(ref)
        ratio = a["rows_per_s"] / b["rows_per_s"] if a and b else None
        status = "N/A" if ratio is None else ("PASS" if ratio >= minimum else "FAIL")
        out.append({"shape": shape, "ratio": f"store/{ref}", "value": ratio, "minimum": minimum, "status": status})
    return out


# --------------------------------------------------------------------------- main

async def amain(args: argparse.Namespace) -> int:
    import asyncpg

    admin = admin_dsn(args.dsn)
    home = Path(tempfile.mkdtemp(prefix="hermes-bench-pg-"))
    os.environ["HERMES_HOME"] = str(home)  # an empty profile: default pool settings, no user config
    w = Workload(args.scale)
    errors: dict[str, str] = {}
    checks: list[str] = []
    samples: dict[str, dict[str, list[float]]] = {}
    started = time.perf_counter()
    probe = await asyncpg.connect(admin)
    try:
        server = await probe.fetchval("SHOW server_version")
        sync_commit = await probe.fetchval("SHOW synchronous_commit")
        fsync = await probe.fetchval("SHOW fsync")
    finally:
        await probe.close()
    print(f"hermes-state append benchmark (PostgreSQL): scale={args.scale} repeat={args.repeat} "
          f"python={platform.python_version()} asyncpg={asyncpg.__version__} server={server} cpus={os.cpu_count()}")
    print(f"server: synchronous_commit={sync_commit} fsync={fsync}; every await returns after its COMMIT")
    sys.stdout.flush()
    try:
        for rep in range(args.repeat):
            results = await run_round(w, admin, args.naive, errors, checks, args.shapes)
            for who, res in results.items():
                for shape, secs in res.items():
                    samples.setdefault(who, {}).setdefault(shape, []).append(secs)
            if args.repeat > 1:
                print(f"  round {rep + 1}/{args.repeat} done ({time.perf_counter() - started:.1f}s)")
                sys.stdout.flush()
    finally:
        os.environ.pop("HERMES_HOME", None)
        for child in home.iterdir():
            child.unlink()
        home.rmdir()
    results = {who: {shape: statistics.median(v) for shape, v in res.items()} for who, res in samples.items()}
    figures, lines = build_report(w, results)
    print()
    print("\n".join(lines))
    targets = evaluate_targets(figures)
    print("\ntargets:")
    for t in targets:
        v = "n/a" if t["value"] is None else f"{t['value']:.2f}x"
        print(f"  ({t['shape']}) {t['ratio']:<14} >= {t['minimum']:<5} got {v:>8}  {t['status']}")
    ceiling = ceilings(figures)
    if ceiling:
        print("\nceilings of (a) (the store commits the same groups of 50 as the per-group limit; "
              "5x needs a limit >= 5x naive):")
        print("\n".join(ceiling))
    print("\nrow checks: " + ("every schema holds all rows and matching counters" if not checks else "PROBLEMS"))
    for c in checks:
        print("  " + c)
    elapsed = time.perf_counter() - started
    print(f"total wall time {elapsed:.1f}s; figures are medians of {args.repeat} round(s); every schema dropped")
    for key, text in errors.items():
        print(f"\nERROR in {key}:\n{text}", file=sys.stderr)
    if args.json:
        out = {
            "backend": "postgres", "scale": args.scale, "server": server, "synchronous_commit": sync_commit,
            "asyncpg": asyncpg.__version__, "cpus": os.cpu_count(), "repeat": args.repeat,
            "counts": {"tasks": w.tasks, "per_task": w.per_task, "single": w.single, "batch": w.batch},
            "figures": figures, "samples_seconds": samples, "targets": targets, "checks": checks,
            "errors": errors, "wall_seconds": elapsed,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if errors or checks:
        return 2
    if args.check and any(t["status"] != "PASS" for t in targets):
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", default=None, help="postgresql:// URL of the server (default: $HERMES_TEST_POSTGRES_DSN "
                   f"or {DEFAULT_DSN})")
    p.add_argument("--scale", type=float, default=1.0, help="multiply message counts (e.g. 0.1 for a smoke run)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the median is reported (default 3)")
    p.add_argument("--no-naive", dest="naive", action="store_false", help="skip the naive contender")
    p.add_argument("--shapes", default="abc", help="write shapes to run, e.g. 'a' or 'ac' (d runs with c)")
    p.add_argument("--json", default=None, metavar="OUT", help="write all figures to this JSON file")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error("--scale must be > 0")
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if not args.shapes or set(args.shapes) - set("abc"):
        p.error("--shapes takes letters from 'abc'")
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
