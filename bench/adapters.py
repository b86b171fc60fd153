"""The OpenAI Agents SDK session shape on ``HermesSession`` against the SDK's own ``SQLiteSession``.

Shape (at ``--scale 1``): 50 sessions run concurrently, each awaiting 200
``add_items`` calls of one item (user, reasoning, function call, tool output
and assistant items in turn), then every session's ``get_items()``.

Contenders, each on its own fresh file, measured in the same run:

  hermes  ``hermes_state.integrations.openai_agents.HermesSession`` on one
          shared ``SessionDB`` (WAL, ``synchronous=FULL``, FTS5 triggers on;
          each ``add_items`` returns after the COMMIT holding it)
  sdk     ``agents.SQLiteSession`` (file-backed; WAL, SQLite's default
          ``synchronous=FULL``; each ``add_items`` commits before returning),
          one instance per session as the SDK intends

Target: hermes throughput over the whole shape >= 2x sdk. Every run checks
that both contenders read back exactly the items written. ``--check`` exits 1
when the target is missed; 2 means a contender failed or lost data.

Run from the repository root::

    python3 bench/adapters.py                 # 3 runs, median ratio
    python3 bench/adapters.py --scale 0.2 --repeat 1
    python3 bench/adapters.py --check --json bench/out/adapters.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

SESSIONS = 50
CALLS = 200
TARGET = 2.0


def item_for(session: int, call: int) -> dict[str, Any]:
    """The call-th item of a session: the kinds a tool-using agent run produces, about 200 bytes each."""
    words = f"session {session} step {call} checks the deployment logs for the failing worker and reports back"
    kind = call % 5
    if kind == 0:
        return {"role": "user", "content": f"Please look into it: {words}."}
    if kind == 1:
        return {"id": f"rs_{session}_{call}", "type": "reasoning",
                "summary": [{"type": "summary_text", "text": f"Plan: {words}."}]}
    if kind == 2:
        return {"id": f"fc_{session}_{call}", "type": "function_call", "call_id": f"call_{session}_{call}",
                "name": "read_logs", "arguments": json.dumps({"worker": session, "lines": call}), "status": "completed"}
    if kind == 3:
        return {"type": "function_call_output", "call_id": f"call_{session}_{call - 1}", "output": f"log: {words}"}
    return {"id": f"msg_{session}_{call}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": f"Found it: {words}.", "annotations": []}]}


async def run_shape(make_session: Callable[[str], Any], calls: int) -> tuple[float, float, float, list[list[Any]]]:
    """Run the shape; returns (add seconds, get seconds, CPU seconds of the process, items read back per session).

    The CPU figure covers every thread of this process (event loop, writer and
    reader threads, the SDK's worker threads) while the shape ran.
    """
    sessions = [make_session(f"bench-{n}") for n in range(SESSIONS)]

    async def converse(n: int) -> None:
        for call in range(calls):
            await sessions[n].add_items([item_for(n, call)])

    cpu = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(converse(n) for n in range(SESSIONS)))
    added = time.perf_counter()
    read = await asyncio.gather(*(s.get_items() for s in sessions))
    done = time.perf_counter()
    return added - started, done - added, time.process_time() - cpu, read


async def run_hermes(directory: Path, calls: int) -> tuple[float, float, float, list[list[Any]], dict[str, Any]]:
    from hermes_state import SessionDB
    from hermes_state.integrations.openai_agents import HermesSession

    db = SessionDB(directory / "hermes" / "state.db")
    try:
        info = await db.storage_info()
        add_s, get_s, cpu_s, read = await run_shape(lambda sid: HermesSession(sid, db), calls)
        hits = await db.search_messages("deployment", limit=1)
        if not hits:
            raise RuntimeError("hermes: FTS found nothing; indexing is off")
    finally:
        await db.close()
    return add_s, get_s, cpu_s, read, info


async def run_sdk(directory: Path, calls: int) -> tuple[float, float, float, list[list[Any]], dict[str, Any]]:
    from agents import SQLiteSession

    path = directory / "sdk" / "sessions.db"
    path.parent.mkdir(parents=True)
    opened: list[Any] = []

    def make(sid: str) -> Any:
        session = SQLiteSession(sid, path)
        opened.append(session)
        return session

    try:
        add_s, get_s, cpu_s, read = await run_shape(make, calls)
    finally:
        for session in opened:
            session.close()
    with sqlite3.connect(path) as conn:
        info = {
            "journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
            "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0],
            "sqlite_version": sqlite3.sqlite_version,
        }
    return add_s, get_s, cpu_s, read, info


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def verify(name: str, read: list[list[Any]], calls: int) -> None:
    for n, items in enumerate(read):
        if items != [item_for(n, call) for call in range(calls)]:
            raise RuntimeError(f"{name}: session {n} read back {len(items)} items that differ from the {calls} written")


def figures(add_s: float, get_s: float, cpu_s: float, calls: int) -> dict[str, float]:
    total = SESSIONS * calls
    return {
        "cpu_us_per_item": cpu_s / total * 1e6,
        "add_items_per_s": total / add_s,
        "get_items_per_s": total / get_s,
        "shape_items_per_s": total / (add_s + get_s),
        "add_s": add_s,
        "get_s": get_s,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the 200 calls per session")
    parser.add_argument("--repeat", type=int, default=3, help="runs on fresh files; the median is reported")
    parser.add_argument("--dir", type=Path, default=None, help="where the fresh temp directory goes")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when the 2x target is missed")
    args = parser.parse_args()
    calls = max(5, int(CALLS * args.scale))

    runs: list[dict[str, Any]] = []
    print(f"shape: {SESSIONS} concurrent sessions x {calls} add_items of one item, then get_items")
    for index in range(args.repeat):
        directory = Path(tempfile.mkdtemp(prefix="hermes-bench-adapters-", dir=args.dir))
        try:
            # Alternate who goes first so neither always runs on a warmer machine.
            order = ("hermes", "sdk") if index % 2 == 0 else ("sdk", "hermes")
            result: dict[str, Any] = {}
            for name in order:
                runner = run_hermes if name == "hermes" else run_sdk
                add_s, get_s, cpu_s, read, info = await runner(directory, calls)
                verify(name, read, calls)
                result[name] = {**figures(add_s, get_s, cpu_s, calls), "storage": info}
        except Exception as exc:
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        result["ratio"] = result["hermes"]["shape_items_per_s"] / result["sdk"]["shape_items_per_s"]
        result["add_ratio"] = result["hermes"]["add_items_per_s"] / result["sdk"]["add_items_per_s"]
        result["cpu_ratio"] = result["sdk"]["cpu_us_per_item"] / result["hermes"]["cpu_us_per_item"]
        runs.append(result)
        print(
            f"run {index + 1}: hermes {result['hermes']['shape_items_per_s']:8.0f} items/s "
            f"(add {result['hermes']['add_items_per_s']:.0f}/s, get {result['hermes']['get_items_per_s']:.0f}/s)  "
            f"sdk {result['sdk']['shape_items_per_s']:8.0f} items/s "
            f"(add {result['sdk']['add_items_per_s']:.0f}/s, get {result['sdk']['get_items_per_s']:.0f}/s)  "
            f"ratio {result['ratio']:.2f}x; CPU/item hermes {result['hermes']['cpu_us_per_item']:.0f} us, "
            f"sdk {result['sdk']['cpu_us_per_item']:.0f} us"
        )

    median = statistics.median(r["ratio"] for r in runs)
    median_add = statistics.median(r["add_ratio"] for r in runs)
    median_cpu = statistics.median(r["cpu_ratio"] for r in runs)
    hermes_info, sdk_info = runs[0]["hermes"]["storage"], runs[0]["sdk"]["storage"]
    print(f"hermes storage: journal {hermes_info.get('journal_mode')}, synchronous from the profile (default full), "
          f"sqlite {hermes_info.get('sqlite_version')} ({hermes_info.get('driver')}), FTS on")
    print(f"sdk storage:    journal {sdk_info['journal_mode']}, synchronous={sdk_info['synchronous']} (2 = FULL), "
          f"sqlite {sdk_info['sqlite_version']}")
    verdict = "PASS" if median >= TARGET else "MISS"
    print(f"median ratio over the shape: {median:.2f}x (add_items alone {median_add:.2f}x); target >= {TARGET:.1f}x: {verdict}")
    print(f"median CPU per item, sdk / hermes: {median_cpu:.2f}x (load average now {_load()})")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"calls": calls, "sessions": SESSIONS, "runs": runs, "median_ratio": median,
                                         "target": TARGET}, indent=2, default=str))
    return 1 if args.check and median < TARGET else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
