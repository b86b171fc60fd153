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

  (w) 20 tasks x awaited ``append_message`` each (own session): the write
      path, group-committed
  (r) 20 tasks x ``get_messages`` of their session (40+ messages)
  (s) 20 tasks x ``search_messages`` of a word every session holds

The three stores stay open side by side; each round runs every shape on
every contender for 20 x 10 calls, the contenders' order rotating from round
to round, so load from elsewhere on the machine hits all three alike. Prints
the median operations per second over the rounds and each contender's ratio
to ``direct``.

    python3 bench/postgres_pooler.py                  # 9 rounds (a minute or two)
    python3 bench/postgres_pooler.py --rounds 3 --scale 0.5   # smoke run
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


class Contender:
    """One store (its own schema) with TASKS sessions of ``messages`` messages each."""

    def __init__(self, url: str) -> None:
        from hermes_state.postgres import SessionDB

        self.db = SessionDB(url)
        self.ids = [f"s{n}" for n in range(TASKS)]

    async def fill(self, messages: int) -> None:
        for sid in self.ids:
            await self.db.create_session(sid, "bench")
            await self.db.append_messages_batch(sid, [{"role": "user", "content": f"m{i} pelican"} for i in range(messages)])

    def calls(self, shape: str, per_task: int) -> list[Any]:
        db = self.db

        def one(sid: str) -> Any:
            async def run() -> None:
                for i in range(per_task):
                    if shape == "w":
                        await db.append_message(sid, "user", f"message {i} of {sid}")
                    elif shape == "r":
                        await db.get_messages(sid)
                    else:
                        await db.search_messages("pelican", limit=10)
            return run

        return [one(sid) for sid in self.ids]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("HERMES_TEST_POSTGRES_DSN") or DEFAULT_DSN)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    per_task = max(1, int(10 * args.scale))

    import asyncpg  # type: ignore[import-untyped]

    from tests.pg_instances import start_pgbouncer, stop_pgbouncer

    bouncer = start_pgbouncer(args.dsn, pool_size=20)
    admin = await asyncpg.connect(args.dsn)
    schemas = [f"hs_bench_{uuid.uuid4().hex}" for _ in range(3)]
    contenders: dict[str, Contender] = {}
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for schema in schemas:
            await admin.execute(f'CREATE SCHEMA "{schema}"')
        contenders = {
            "direct": Contender(store_url(args.dsn, schemas[0])),
            "direct+pooler": Contender(store_url(args.dsn, schemas[1], "pooler=transaction")),
            "pgbouncer": Contender(store_url(bouncer.admin_dsn, schemas[2], "pooler=transaction")),
        }
        for contender in contenders.values():
            await contender.fill(40)
        labels = list(contenders)
        # Short rounds, the contenders' order rotating: load from elsewhere hits each alike.
        for n in range(args.rounds):
            for shape in ("w", "r", "s"):
                for label in labels[n % 3:] + labels[: n % 3]:
                    seconds = await timed(contenders[label].calls(shape, per_task))
                    rates.setdefault((label, shape), []).append(TASKS * per_task / seconds)
    finally:
        for contender in contenders.values():
            await contender.db.close()
        for schema in schemas:
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
        stop_pgbouncer(bouncer)

    names = {"w": f"(w) {TASKS} tasks x append_message", "r": f"(r) {TASKS} tasks x get_messages (40 rows)",
             "s": f"(s) {TASKS} tasks x search_messages"}
    print(f"median of {args.rounds} rounds of {TASKS}x{per_task} calls; ops/s, and ratio to direct")
    print(f"{'shape':40} {'direct':>10} {'direct+pooler':>20} {'pgbouncer':>20}")
    for shape, name in names.items():
        median = {label: statistics.median(rates[(label, shape)]) for label in contenders}
        base = median["direct"]
        cells = [f"{median[label]:8.0f} ({median[label] / base:4.2f}x)" for label in ("direct+pooler", "pgbouncer")]
        print(f"{name:40} {base:10.0f} {cells[0]:>20} {cells[1]:>20}")


if __name__ == "__main__":
    asyncio.run(main())
