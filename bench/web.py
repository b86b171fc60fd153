"""``hermes-state serve`` page latency (issue 24), measured over HTTP against the library in the same run.

The store: ``--sessions`` sessions (default 2,000) holding ``--messages``
messages (default 200,000), one of them a ``--long`` (5,000) message
transcript; the others share the rest. Text is generated from a few
hundred words with a skewed distribution, some turns carry tool calls and
tool results, every session has token usage. It is built once through the
public API and cached under ``bench/out/``; each run serves that file
read-only (it stays unchanged).

The viewer runs as the user runs it (``python -m hermes_state --db FILE
serve --port 0``, its own process); this process sends requests over one
keep-alive connection and times each full response. Figures, p95 over
``--rounds`` rounds (default 60):

  /                    the first page of the session list (limit 300 ms)
  transcript           the first page of the 5,000-message session (limit 1 s)
  /search?q=WORD       for several words of different frequency, against
                       ``search_messages`` with the page's own arguments on a
                       read-only store in this process, timed alternately in
                       the same rounds (limit: the page within 1.2x); also
                       ``search_messages`` gathered with ``count_search_matches``,
                       what a query's first view costs (the page reuses a
                       query's hit count for 30 s, so its rounds after the
                       first show the search alone)

Run from the repository root::

    python3 bench/web.py                        # builds the store once (~1-2 min), then measures
    python3 bench/web.py --rounds 20            # quicker
    python3 bench/web.py --backend postgres --dsn postgresql://postgres@127.0.0.1:5432/test
    python3 bench/web.py --json bench/out/web.json
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hermes_state import SessionDB  # noqa: E402
from hermes_state.web.hitcount import SEARCH_COUNT_CAP  # noqa: E402
from hermes_state.web.pages import SEARCH_FIELDS, SEARCH_PAGE  # noqa: E402

OUT = REPO / "bench" / "out"
LIMIT_LIST_MS = 300.0
LIMIT_TRANSCRIPT_MS = 1000.0
LIMIT_SEARCH_RATIO = 1.2
LONG_ID = "long-transcript"

COMMON = ("the and to of a in is that it for on with as this be are was by".split()
          + "deploy docker compose volume error log file test build server request response".split())
RARE = [f"{a}{b}" for a in ("zyg", "quor", "plim", "vex", "trum", "snar", "blen", "krat") for b in
        ("al", "ix", "um", "or", "et", "ane", "ode", "ith")]
# Words the search rounds ask for: very common, common, rare, and a two-word phrase.
QUERIES = ("the", "docker", "quoral", '"volume error"', "nomatchword")


def _text(rng: random.Random, words: int) -> str:
    out = []
    for _ in range(words):
        pool = COMMON if rng.random() < 0.93 else RARE
        out.append(rng.choice(pool))
    return " ".join(out)


def _messages(rng: random.Random, count: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while len(rows) < count:
        rows.append({"role": "user", "content": _text(rng, rng.randint(8, 40))})
        if rng.random() < 0.3:
            call = {"id": f"c{len(rows)}", "type": "function",
                    "function": {"name": "terminal", "arguments": json.dumps({"command": _text(rng, 4)})}}
            rows.append({"role": "assistant", "content": None, "tool_calls": [call]})
            rows.append({"role": "tool", "content": _text(rng, rng.randint(20, 200)), "tool_call_id": call["id"],
                         "tool_name": "terminal"})
        rows.append({"role": "assistant", "content": _text(rng, rng.randint(20, 80))})
    return rows[:count]


async def build(db: Any, sessions: int, messages: int, long: int) -> None:
    rng = random.Random(24)
    per = (messages - long) // (sessions - 1)
    plan = [(LONG_ID, long)] + [(f"s{n:05d}", per) for n in range(sessions - 1)]

    async def one(session_id: str, count: int) -> None:
        await db.create_session(session_id, rng.choice(["cli", "telegram", "api"]), model=rng.choice(["m-large", "m-small"]))
        await db.set_session_title(session_id, f"{_text(rng, 4)[:50]} ({session_id})")
        await db.append_messages_batch(session_id, _messages(rng, count), chunk_rows=2000)
        await db.update_token_counts(session_id, input_tokens=rng.randint(100, 90000), output_tokens=rng.randint(10, 9000),
                                     estimated_cost_usd=rng.random(), api_call_count=rng.randint(1, 40))

    for start in range(0, len(plan), 50):
        await asyncio.gather(*(one(sid, count) for sid, count in plan[start:start + 50]))


def _store(backend: str, target: str, **kwargs: Any) -> Any:
    if backend == "postgres":
        from hermes_state.postgres import SessionDB as PostgresSessionDB

        return PostgresSessionDB(target, **kwargs)
    return SessionDB(target, **kwargs)


async def ensure_store(args: argparse.Namespace) -> str:
    """The ``--db`` of the built store (built now unless cached)."""
    if args.backend == "postgres":
        import asyncpg

        schema = f"bench_web_{args.sessions}_{args.messages}_{args.long}"
        admin = args.dsn
        conn = await asyncpg.connect(admin)
        try:
            exists = await conn.fetchval("SELECT 1 FROM information_schema.schemata WHERE schema_name = $1", schema)
            if not exists:
                await conn.execute(f'CREATE SCHEMA "{schema}"')
        finally:
            await conn.close()
        target = admin.replace("postgresql://", "postgresql+asyncpg://", 1) + f"?search_path={schema}"
        if exists:
            return target
    else:
        OUT.mkdir(parents=True, exist_ok=True)
        path = OUT / f"web-{args.sessions}-{args.messages}-{args.long}.db"
        if path.exists():
            return str(path)
        target = str(path)
    started = time.perf_counter()
    print(f"building {args.sessions:,} sessions / {args.messages:,} messages ...", flush=True)
    db = _store(args.backend, target)
    try:
        await build(db, args.sessions, args.messages, args.long)
    finally:
        await db.close()
    print(f"built in {time.perf_counter() - started:.0f} s", flush=True)
    return target


class Client:
    """One keep-alive HTTP connection to the viewer."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def get(self, path: str) -> float:
        """Seconds until the whole response of ``GET path`` has arrived (it must be a 200)."""
        try:
            return self._get(path)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            # The server closed an idle keep-alive connection: the retry opens a new one.
            self.conn.close()
            return self._get(path)

    def _get(self, path: str) -> float:
        started = time.perf_counter()
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        body = response.read()
        elapsed = time.perf_counter() - started
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
        return elapsed


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[18] * 1000 if len(samples) >= 2 else samples[0] * 1000


async def measure(args: argparse.Namespace, target: str) -> dict[str, Any]:
    viewer = subprocess.Popen([sys.executable, "-m", "hermes_state", "--db", target, "serve", "--port", "0"],
                              stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    assert viewer.stdout is not None
    url = viewer.stdout.readline().strip()
    results: dict[str, Any] = {"backend": args.backend, "sessions": args.sessions, "messages": args.messages,
                               "rounds": args.rounds}
    reader = _store(args.backend, target, read_only=True)
    try:
        client = Client(url)
        for _ in range(3):  # warm both sides: caches, statements, templates
            client.get("/")
            client.get(f"/sessions/{LONG_ID}")
        listing = [client.get("/") for _ in range(args.rounds)]
        transcript = [client.get(f"/sessions/{quote(LONG_ID)}") for _ in range(args.rounds)]
        results["list_p95_ms"] = p95(listing)
        results["transcript_p95_ms"] = p95(transcript)
        results["search"] = {}
        for query in QUERIES:
            path = f"/search?q={quote(query)}"
            page: list[float] = []
            library: list[float] = []
            counted: list[float] = []
            for n in range(args.rounds + 3):
                for side in ((0, 1, 2), (1, 2, 0), (2, 0, 1))[n % 3]:
                    if side == 0:
                        elapsed = client.get(path)
                    else:
                        started = time.perf_counter()
                        search = reader.search_messages(query, limit=SEARCH_PAGE + 1, fields=SEARCH_FIELDS)
                        if side == 1:
                            await search
                        else:
                            await asyncio.gather(search, reader.count_search_matches(query, cap=SEARCH_COUNT_CAP))
                        elapsed = time.perf_counter() - started
                    if n >= 3:
                        (page, library, counted)[side].append(elapsed)
            results["search"][query] = {"page_p95_ms": p95(page), "search_messages_p95_ms": p95(library),
                                        "with_count_p95_ms": p95(counted), "ratio": p95(page) / p95(library)}
    finally:
        await reader.close()
        viewer.terminate()
        viewer.wait(timeout=30)
    return results


def report(results: dict[str, Any]) -> bool:
    ok = True
    print(f"\nhermes-state serve, {results['backend']}: {results['sessions']:,} sessions, "
          f"{results['messages']:,} messages, p95 of {results['rounds']} rounds")
    for name, key, limit in (("/ (first page)", "list_p95_ms", LIMIT_LIST_MS),
                             (f"/sessions/{LONG_ID} (first page of 5,000)", "transcript_p95_ms", LIMIT_TRANSCRIPT_MS)):
        value = results[key]
        verdict = "ok" if value < limit else "OVER"
        ok &= value < limit
        print(f"  {name:<48} {value:8.1f} ms   limit {limit:.0f} ms   {value / limit:5.2f} of the limit  {verdict}")
    print(f"  /search against search_messages(q, limit={SEARCH_PAGE + 1}, fields=<the page's>) in the same rounds:")
    for query, figures in results["search"].items():
        ratio = figures["ratio"]
        verdict = "ok" if ratio <= LIMIT_SEARCH_RATIO else "OVER"
        ok &= ratio <= LIMIT_SEARCH_RATIO
        print(f"    q={query:<16} page {figures['page_p95_ms']:7.2f} ms   search_messages "
              f"{figures['search_messages_p95_ms']:7.2f} ms   ratio {ratio:5.2f} (limit {LIMIT_SEARCH_RATIO})  {verdict}"
              f"   (with count_search_matches {figures['with_count_p95_ms']:7.2f} ms)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--dsn", default=os.environ.get("HERMES_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--long", type=int, default=5000, help="messages of the long transcript")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure misses its limit")
    args = parser.parse_args()
    target = asyncio.run(ensure_store(args))
    results = asyncio.run(measure(args, target))
    ok = report(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
