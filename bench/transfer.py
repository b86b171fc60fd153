"""Peak memory of the moving commands (export, import, copy, verify) at 100,000 messages, against a small baseline.

Each command runs as a user runs it (``python -m hermes_state ...``) in a
fresh subprocess that reports its own peak RSS (``VmHWM``), once on a
baseline store of 1,000 messages and once on the large store (``--messages
N``, default 100,000, in sessions of 1,000). Memory must follow the batch
budget (5,000 messages / 4 MiB per transaction, a page of 1,000 rows per
read), not the store: the limit is the baseline's peak plus 48 MiB, measured
in the same run, and the ratio printed is the large peak over that limit
(<= 1.0 passes). Every command's result is checked (rows exported,
imported and copied; verification clean).

Run from the repository root::

    python3 bench/transfer.py                          # SQLite to SQLite (a few minutes on 2 cores)
    python3 bench/transfer.py --messages 20000         # smaller
    python3 bench/transfer.py --postgres postgresql://postgres@127.0.0.1:5432/test   # also copy to PostgreSQL
    python3 bench/transfer.py --json bench/out/transfer.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

BASELINE_MESSAGES = 1_000
SESSION_SIZE = 1_000
MARGIN_KIB = 48 * 1024

async def build(path: Path, messages: int) -> None:
    """``messages`` rows in sessions of :data:`SESSION_SIZE`: text turns, a tool call and its output every 10th."""
    from hermes_state import SessionDB

    filler = "the deployment log says the volume is missing and the retry budget ran out " * 2
    async with SessionDB(path) as db:
        for s in range(max(1, messages // SESSION_SIZE)):
            session_id = f"bench-{s:05d}"
            await db.create_session(session_id, "bench", model="m", system_prompt="be brief")
            rows: list[dict[str, Any]] = []
            for i in range(min(SESSION_SIZE, messages)):
                if i % 10 == 9:
                    rows.append({"role": "tool", "content": f"{i} {filler}", "tool_call_id": f"c{i}", "tool_name": "shell"})
                elif i % 10 == 8:
                    rows.append({"role": "assistant", "content": None,
                                 "tool_calls": [{"id": f"c{i + 1}", "type": "function",
                                                 "function": {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}}]})
                else:
                    rows.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"{session_id} {i} {filler}"})
            await db.append_messages_batch(session_id, rows)
            await db.update_token_counts(session_id, input_tokens=100, output_tokens=20, model="m")


def measured(home: Path, *args: str) -> tuple[dict[str, Any], int, float]:
    """(JSON output, peak RSS KiB, seconds) of one command; exits 2 when it failed."""
    from tests.cli_support import run_measured

    started = time.perf_counter()
    done, peak = run_measured(home, *args, "--json", timeout=3600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        print(f"command failed ({done.returncode}): {' '.join(args)}\n{done.stderr[-2000:]}", file=sys.stderr)
        raise SystemExit(2)
    return json.loads(done.stdout) if done.stdout.strip() else {}, peak, elapsed


def run_size(work: Path, name: str, messages: int, postgres: str | None) -> dict[str, tuple[int, float]]:
    """Every command on a fresh store of ``messages`` rows; returns command -> (peak KiB, seconds)."""
    source = work / f"{name}.db"
    asyncio.run(build(source, messages))
    results: dict[str, tuple[int, float]] = {}
    out = work / f"{name}.jsonl"
    report, peak, took = measured(work, "--db", str(source), "export", "-o", str(out))
    assert report["messages"] == messages, report
    results["export"] = (peak, took)
    report, peak, took = measured(work, "--db", str(work / f"{name}-imported.db"), "import", str(out))
    assert report["inserted"]["messages"] == messages and not report["conflicts"], report
    results["import"] = (peak, took)
    copy = work / f"{name}-copy.db"
    report, peak, took = measured(work, "--db", str(source), "copy", "--to", str(copy))
    assert report["inserted"]["messages"] == messages and report["verified"], report
    results["copy (with its verification)"] = (peak, took)
    report, peak, took = measured(work, "verify", str(source), str(copy))
    assert report["verified"] and report["rows"]["messages"]["source"] == messages, report
    results["verify"] = (peak, took)
    if postgres:
        url = _schema_url(postgres, f"hs_bench_{uuid.uuid4().hex[:8]}")
        try:
            report, peak, took = measured(work, "--db", str(source), "copy", "--to", url)
            assert report["inserted"]["messages"] == messages and report["verified"], report
            results["copy to PostgreSQL"] = (peak, took)
        finally:
            _drop_schema(postgres, url)
    return results


def _admin(server: str, statement: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    async def run() -> None:
        conn = await asyncpg.connect(server)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def _schema_url(server: str, schema: str) -> str:
    _admin(server, f'CREATE SCHEMA "{schema}"')
    return f"{server}{'&' if '?' in server else '?'}search_path={schema}"


def _drop_schema(server: str, url: str) -> None:
    _admin(server, f'DROP SCHEMA IF EXISTS "{url.rsplit("search_path=", 1)[1]}" CASCADE')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the large store (default 100000)")
    parser.add_argument("--postgres", metavar="URL", help="also copy each store to a fresh schema on this server")
    parser.add_argument("--dir", type=Path, help="where the run's temp directory goes (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure to OUT")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hermes-transfer-", dir=args.dir))
    try:
        load = os.getloadavg()[0]
        base = run_size(work, "baseline", BASELINE_MESSAGES, args.postgres)
        large = run_size(work, "large", args.messages, args.postgres)
        print(f"peak RSS, {args.messages:,} messages against {BASELINE_MESSAGES:,} (limit: baseline + "
              f"{MARGIN_KIB // 1024} MiB); load {load:.1f} -> {os.getloadavg()[0]:.1f}")
        print(f"{'command':<30} {'baseline MiB':>12} {'large MiB':>10} {'limit MiB':>10} {'ratio':>6} {'large s':>8}")
        figures = {}
        worst = 0.0
        for command, (peak, took) in large.items():
            floor = base[command][0]
            limit = floor + MARGIN_KIB
            ratio = peak / limit
            worst = max(worst, ratio)
            figures[command] = {"baseline_kib": floor, "large_kib": peak, "limit_kib": limit, "ratio": round(ratio, 3),
                                "seconds": round(took, 1), "baseline_seconds": round(base[command][1], 1)}
            print(f"{command:<30} {floor / 1024:>12.1f} {peak / 1024:>10.1f} {limit / 1024:>10.1f} {ratio:>6.2f} {took:>8.1f}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"messages": args.messages, "figures": figures}, indent=2))
        return 0 if worst <= 1.0 else 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
