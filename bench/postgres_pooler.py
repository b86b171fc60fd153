"""What a transaction pooler costs the PostgreSQL store: direct connections against PgBouncer.

Three contenders, each on a fresh schema of its own (dropped afterwards),
measured in the same run, one after the other:

  direct          the store on the server itself (asyncpg's statement cache on;
                  settings are startup parameters): the baseline
  direct+pooler   the same server with ``pooler=transaction``: no statement
                  cache, settings sent with each BEGIN (the store-side cost alone)
  pgbouncer       ``pooler=transaction`` through PgBouncer 1.18 in transaction
                  mode (started here on a spare loopback port, stopped after)

Shapes:

  (w) TASKS tasks x APPENDS awaited ``append_message`` each (own session):
      the write path, group-committed
  (r) TASKS tasks x READS ``get_messages`` of their 40-message session
  (s) TASKS tasks x READS ``search_messages`` of a word every session holds

Prints operations per second and each contender's ratio to ``direct``.

    python3 bench/postgres_pooler.py                  # default run (about a minute)
    python3 bench/postgres_pooler.py --scale 0.3      # smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
TASKS = 20


def store_url(server: str, schema: str, *extra: str) -> str:
    """The store URL (``postgresql+asyncpg://``) of ``server`` pinned to ``schema``, plus ``extra`` parameters."""
    rest = server.split("://", 1)[1]
    query = "&".join([f"search_path={schema}", *extra])
    return f"postgresql+asyncpg://{rest}{'&' if '?' in rest else '?'}{query}"


async def timed(calls: list[Any]) -> float:
    """Seconds to run every coroutine factory in ``calls`` at once."""
    started = time.perf_counter()
    await asyncio.gather(*(call() for call in calls))
    return time.perf_counter() - started


async def run_contender(url: str, appends: int, reads: int) -> dict[str, float]:
    """Operations per second of each shape for the store at ``url``."""
    from hermes_state.postgres import SessionDB

    db = SessionDB(url)
    try:
        ids = [f"s{n}" for n in range(TASKS)]
        for sid in ids:
            await db.create_session(sid, "bench")

        def writer(sid: str) -> Any:
            async def run() -> None:
                for i in range(appends):
                    await db.append_message(sid, "user", f"message {i} of {sid} pelican")
            return run

        def reader(sid: str, search: bool) -> Any:
            async def run() -> None:
                for _ in range(reads):
                    if search:
                        await db.search_messages("pelican", limit=10)
                    else:
                        await db.get_messages(sid)
            return run

        seconds_w = await timed([writer(sid) for sid in ids])
        seconds_r = await timed([reader(sid, False) for sid in ids])
        seconds_s = await timed([reader(sid, True) for sid in ids])
    finally:
        await db.close()
    return {"w": TASKS * appends / seconds_w, "r": TASKS * reads / seconds_r, "s": TASKS * reads / seconds_s}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("HERMES_TEST_POSTGRES_DSN") or DEFAULT_DSN)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    appends, reads = max(1, int(40 * args.scale)), max(1, int(30 * args.scale))

    import asyncpg  # type: ignore[import-untyped]

    from tests.pg_instances import start_pgbouncer, stop_pgbouncer

    bouncer = start_pgbouncer(args.dsn, pool_size=20)
    admin = await asyncpg.connect(args.dsn)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        contenders = {
            "direct": lambda schema: store_url(args.dsn, schema),
            "direct+pooler": lambda schema: store_url(args.dsn, schema, "pooler=transaction"),
            "pgbouncer": lambda schema: store_url(bouncer.admin_dsn, schema, "pooler=transaction"),
        }
        for _ in range(args.repeat):
            for label, url_of in contenders.items():  # interleaved, so drift hits every contender alike
                schema = f"hs_bench_{uuid.uuid4().hex}"
                await admin.execute(f'CREATE SCHEMA "{schema}"')
                try:
                    results.setdefault(label, []).append(await run_contender(url_of(schema), appends, reads))
                finally:
                    await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    finally:
        await admin.close()
        stop_pgbouncer(bouncer)

    names = {"w": f"(w) {TASKS}x{appends} appends", "r": f"(r) {TASKS}x{reads} get_messages",
             "s": f"(s) {TASKS}x{reads} search_messages"}
    print(f"median of {args.repeat} runs; ops/s, and ratio to direct")
    print(f"{'shape':32} {'direct':>10} {'direct+pooler':>22} {'pgbouncer':>22}")
    for shape, name in names.items():
        median = {label: statistics.median(r[shape] for r in runs) for label, runs in results.items()}
        base = median["direct"]
        cells = [f"{median['direct']:10.0f}"] + [
            f"{median[label]:10.0f} ({median[label] / base:5.2f}x)" for label in ("direct+pooler", "pgbouncer")
        ]
        print(f"{name:32} {' '.join(f'{c:>22}' if i else c for i, c in enumerate(cells))}")


if __name__ == "__main__":
    asyncio.run(main())
