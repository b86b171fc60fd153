"""Read replicas (issue 29): read throughput primary-only vs primary + 1 replica, and the write cost.

Starts its own primary and one streaming standby (``tests/pg_cluster.py``:
initdb, ``pg_basebackup -R``, spare loopback ports; stopped at the end), seeds
``--sessions`` sessions of ``--messages`` messages, then measures, each for
``--seconds`` in ``--procs`` worker processes (one store each):

  writes      W agents per process appending; the baseline store has no
              replicas, the contender has ``read_replicas`` (so it records the
              primary's WAL position after every batch)
  reads       R readers per process, ``get_messages`` of random sessions, on a
              read-only store: the primary vs ``read_replicas=[standby]``
  mixed       both at once, each process one store doing W appends and R
              reads in parallel: the primary answers every read, vs the replica
              (a read after the store's own write waits for the replica's replay)

Baseline and contender alternate ``--rounds`` times (medians reported), so
both see the same machine load. Ratios are contender / baseline of the same run. Both servers and the client
share this machine's cores, so a replica here shows routing cost and
offloading, not a second machine's capacity.

    python3 bench/postgres_replicas.py                     # default run (~1 min)
    python3 bench/postgres_replicas.py --seconds 2 --procs 1 --json bench/out/replicas.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))


def _store_url(port: int) -> str:
    return f"postgresql+asyncpg://postgres@127.0.0.1:{port}/postgres"


async def _work(kind: str, url: str, replicas: list[str], seconds: float, writers: int, readers: int,
                sessions: int, seed: int) -> dict[str, Any]:
    from hermes_state.postgres import SessionDB

    rng = random.Random(seed)
    counts = {"writes": 0, "reads": 0}
    own = f"w{seed}-{time.time_ns()}"  # a fresh transcript per phase: reads of it stay comparable
    read_only = kind == "reads"
    async with SessionDB(url, read_only=read_only, read_replicas=replicas or None) as db:
        if not read_only:
            await db.create_session(own, "bench")
        deadline = time.monotonic() + seconds

        async def write() -> None:
            while time.monotonic() < deadline:
                await db.append_message(own, "user", "x" * 200)
                counts["writes"] += 1

        async def read() -> None:
            while time.monotonic() < deadline:
                target = own if kind == "mixed" and rng.random() < 0.5 else f"seed{rng.randrange(sessions)}"
                await db.get_messages(target)
                counts["reads"] += 1

        tasks = []
        if kind in ("writes", "mixed"):
            tasks += [write() for _ in range(writers)]
        if kind in ("reads", "mixed"):
            tasks += [read() for _ in range(readers)]
        await asyncio.gather(*tasks)
        counts["routing"] = (await db.writer_stats())["read_routing"]
    return counts


def _proc(args: tuple[Any, ...]) -> dict[str, Any]:
    return asyncio.run(_work(*args))


def _phase(pool: Any, kind: str, url: str, replicas: list[str], opts: argparse.Namespace) -> dict[str, Any]:
    jobs = [(kind, url, replicas, opts.seconds, opts.writers, opts.readers, opts.sessions, n) for n in range(opts.procs)]
    results = pool.map(_proc, jobs)
    routed: dict[str, int] = {}
    for result in results:
        for key in ("primary", "replica", "waited", "behind_own_write"):
            routed[key] = routed.get(key, 0) + int((result["routing"] or {}).get(key, 0))
    return {
        "writes_per_s": sum(r["writes"] for r in results) / opts.seconds,
        "reads_per_s": sum(r["reads"] for r in results) / opts.seconds,
        "routing": routed if replicas else None,
    }


def _median(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """Median rates over rounds; routing counts summed."""
    routing = None
    if phases[0]["routing"] is not None:
        routing = {key: sum(p["routing"][key] for p in phases) for key in phases[0]["routing"]}
    return {
        "writes_per_s": statistics.median(p["writes_per_s"] for p in phases),
        "reads_per_s": statistics.median(p["reads_per_s"] for p in phases),
        "routing": routing,
    }


async def _seed(url: str, sessions: int, messages: int) -> None:
    from hermes_state.postgres import SessionDB

    async with SessionDB(url) as db:
        for n in range(sessions):
            await db.create_session(f"seed{n}", "bench")
            await db.append_messages_batch(f"seed{n}", [{"role": "user", "content": f"m{i} " + "y" * 300} for i in range(messages)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--writers", type=int, default=8, help="appending agents per process")
    parser.add_argument("--readers", type=int, default=8, help="reading agents per process")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="alternating baseline/contender rounds (medians)")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()

    from tests import pg_cluster

    cluster = pg_cluster.start_primary()
    try:
        standby = cluster.add_standby()
        primary_url, replica_url = _store_url(cluster.primary.port), _store_url(standby.port)
        asyncio.run(_seed(primary_url, opts.sessions, opts.messages))
        time.sleep(1.0)  # the standby replays the seed
        print(f"# primary :{cluster.primary.port}, replica :{standby.port}; {opts.procs} procs x "
              f"{opts.writers} writers / {opts.readers} readers, {opts.seconds:g} s each; "
              f"load avg {os.getloadavg()[0]:.2f}")
        figures: dict[str, Any] = {}
        with multiprocessing.get_context("spawn").Pool(opts.procs) as pool:
            for kind, measure in (("writes", "writes_per_s"), ("reads", "reads_per_s"), ("mixed", None)):
                rounds = [(_phase(pool, kind, primary_url, [], opts), _phase(pool, kind, primary_url, [replica_url], opts))
                          for _ in range(opts.rounds)]
                base, with_replica = _median([b for b, _ in rounds]), _median([r for _, r in rounds])
                figures[kind] = {"primary_only": base, "with_replica": with_replica, "rounds": rounds}
                for key in (measure,) if measure else ("writes_per_s", "reads_per_s"):
                    ratio = with_replica[key] / base[key] if base[key] else float("nan")
                    print(f"{kind:7s} {key:13s} primary-only {base[key]:9.0f}   + replica {with_replica[key]:9.0f}"
                          f"   ratio {ratio:.2f}")
                if with_replica["routing"]:
                    print(f"        routing with replica: {with_replica['routing']}")
        figures["load_avg_end"] = os.getloadavg()[0]
        print(f"# load avg at end {figures['load_avg_end']:.2f}")
        if opts.json:
            opts.json.parent.mkdir(parents=True, exist_ok=True)
            opts.json.write_text(json.dumps(figures, indent=2))
    finally:
        cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
