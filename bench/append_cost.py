"""Instructions per awaited ``append_message`` (shape (b) of ``append.py``), counted by callgrind.

Wall-clock ratios of the sequential shape move with the machine's load (two
thread wake-ups per append in the store, none in the limit). Instruction
counts do not: this script runs N sequential appends under ``valgrind
--tool=callgrind --separate-threads=yes`` for two values of N and prints the
difference per append, per thread, for

  store   ``SessionDB.append_message`` awaited one after another (thread 1 is
          the event loop; the others are the writer and reader threads)
  limit   one committed transaction per row on one connection (the same
          statements as ``append.py``'s "1 commit per row")

Both write the same texts to a fresh file with the store's schema, WAL,
``synchronous=FULL``. Kernel time (fsync, wake-ups) is not counted.

    python3 bench/append_cost.py            # needs valgrind; about a minute
    python3 bench/append_cost.py --fenced   # also fenced appends (turn leases) against unfenced ones
    python3 bench/append_cost.py --agents   # fenced against unfenced with 50 concurrent agents
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))


def _texts(n: int) -> list[str]:
    return [f"turn {i}: the agent called a tool and read its result, then wrote an answer " * (1 + i % 4) for i in range(n)]


AGENTS = 50


async def _agents(db: Any, n: int, fence: str) -> None:
    """``n`` appends by ``AGENTS`` concurrent tasks on sessions of their own (the writer batches them)."""
    texts = _texts(max(1, n // AGENTS))

    async def agent(k: int) -> None:
        sid = f"a{k}"
        await db.create_session(sid, source="bench", model="m")
        if fence == "turn":
            async with db.session_turn(sid, f"turn-{k}", ttl_seconds=3600) as turn:
                for i, text in enumerate(texts):
                    await turn.append_message(sid, "user" if i % 2 else "assistant", text)
            return
        extra = {}
        if fence == "holder":
            assert await db.try_acquire_session_turn_lease(sid, f"holder-{k}", ttl_seconds=3600)
            extra = {"turn_lease_holder": f"holder-{k}"}
        for i, text in enumerate(texts):
            await db.append_message(sid, "user" if i % 2 else "assistant", text, **extra)

    await asyncio.gather(*(agent(k) for k in range(AGENTS)))


async def _store(n: int, d: Path, fence: str = "", agents: bool = False) -> None:
    """``n`` sequential appends (or by ``AGENTS`` tasks); ``fence`` "holder" passes ``turn_lease_holder``,
    "turn" writes through a ``session_turn``."""
    from hermes_state import SessionDB

    db = SessionDB(str(d / "store.db"))
    try:
        if agents:
            await _agents(db, n, fence)
            return
        await db.create_session("b", source="bench", model="m")
        if fence == "turn":
            async with db.session_turn("b", "bench-turn", ttl_seconds=3600) as turn:
                for i, text in enumerate(_texts(n)):
                    await turn.append_message("b", "user" if i % 2 else "assistant", text)
            return
        extra = {}
        if fence == "holder":
            assert await db.try_acquire_session_turn_lease("b", "bench-holder", ttl_seconds=3600)
            extra = {"turn_lease_holder": "bench-holder"}
        for i, text in enumerate(_texts(n)):
            await db.append_message("b", "user" if i % 2 else "assistant", text, **extra)
    finally:
        await db.close()


def _limit(n: int, d: Path) -> None:
    from bench.append import ROLE, SESSION_SQL, _sync_setup, _write_per_row_commit, row
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(d / "limit.db"), isolation_level=None, check_same_thread=False)
    try:
        _sync_setup(conn)
        conn.execute(SESSION_SQL, ("b", time.time()))
        for i, text in enumerate(_texts(n)):
            _write_per_row_commit(conn, [row("b", ROLE[(i + 1) % 2], text, time.time())])
    finally:
        conn.close()


def _child(who: str, n: int) -> None:
    d = Path(tempfile.mkdtemp(prefix="hermes-cost-"))
    (d / "home").mkdir()
    os.environ["HERMES_HOME"] = str(d / "home")  # no user config.yaml
    if who.startswith("store"):
        parts = who.split("-")
        asyncio.run(_store(n, d, parts[1] if len(parts) > 1 and parts[1] != "plain" else "", "agents" in parts))
    else:
        _limit(n, d)


def _totals(pattern: str) -> dict[int, int]:
    """Instructions per thread (1 = main) of one callgrind run."""
    out: dict[int, int] = {}
    for path in glob.glob(pattern):
        m = re.search(r"-(\d+)$", path)
        thread = int(m.group(1)) if m else 1
        with open(path) as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    out[thread] = int(line.split()[1])
                    break
    return out


def _measure(who: str, sizes: tuple[int, int], work: Path) -> dict[int, float]:
    runs = []
    for n in sizes:
        prefix = work / f"{who}.{n}"
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p",
             sys.executable, __file__, "--child", who, str(n)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        runs.append(_totals(f"{prefix}.*"))
    small, large = runs
    span = sizes[1] - sizes[0]
    return {t: (large[t] - small.get(t, 0)) / span for t in large}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child", nargs=2, metavar=("WHO", "N"), help=argparse.SUPPRESS)
    p.add_argument("--sizes", type=int, nargs=2, default=(100, 400), metavar=("N1", "N2"),
                   help="append counts of the two runs whose difference is reported (default 100 400)")
    p.add_argument("--fenced", action="store_true",
                   help="also count fenced appends (turn_lease_holder=, and through session_turn) against unfenced ones")
    p.add_argument("--agents", action="store_true",
                   help=f"fenced against unfenced only, with {AGENTS} concurrent agents (sizes are total appends)")
    args = p.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return 0
    if args.agents:
        sizes = tuple(args.sizes) if args.sizes != (100, 400) else (500, 2000)
        with tempfile.TemporaryDirectory(prefix="hermes-callgrind-") as tmp:
            counts = {m: sum(_measure(f"store-{m}-agents", sizes, Path(tmp)).values()) for m in ("plain", "holder", "turn")}
        print(f"instructions per append, {AGENTS} agents (callgrind, user space only, all threads)")
        for mode, count in counts.items():
            print(f"  {mode:6} {count:>10,.0f}   / plain: {count / counts['plain']:.3f}" + ("" if mode == "plain" else " (target <= 1.10)"))
        return 0
    with tempfile.TemporaryDirectory(prefix="hermes-callgrind-") as tmp:
        store = _measure("store", tuple(args.sizes), Path(tmp))
        limit = _measure("limit", tuple(args.sizes), Path(tmp))
    loop = store.get(1, 0.0)
    others = sum(v for t, v in store.items() if t != 1)
    limit_total = sum(limit.values())
    print("instructions per append (callgrind, user space only)")
    print(f"  store: event loop thread {loop:>10,.0f}")
    print(f"         other threads     {others:>10,.0f}   (the writer's transaction)")
    print(f"         total             {loop + others:>10,.0f}")
    print(f"  limit: one commit per row {limit_total:>9,.0f}")
    print(f"  store / limit: {(loop + others) / limit_total:.3f}")
    if args.fenced:
        plain = loop + others
        with tempfile.TemporaryDirectory(prefix="hermes-callgrind-") as tmp:
            for fence in ("holder", "turn"):
                fenced = sum(_measure(f"store-{fence}", tuple(args.sizes), Path(tmp)).values())
                print(f"  fenced ({fence:6}): {fenced:>10,.0f}   fenced / unfenced: {fenced / plain:.3f} (target <= 1.10)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
