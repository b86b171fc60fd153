"""``search_messages`` on realistic text, against the bare statement that serves each query.

The corpus (issue 14, "search on realistic text"): 100 sessions x 1,000
messages of 40 words, the words drawn with a Zipf distribution over about
5,000 words (the common and technical words of ``bench/search.py`` first,
then generated ones), a collocation such as "docker compose" in about a
third of the messages. Built once through ``append_messages_batch`` and
cached under ``bench/out/``; each run works on a fresh copy.

During the measurement 10 writer tasks append through the store (one
append every ``--interval`` s each). Each query is timed twice in the same
round, under the same load, the two in random order: through
``search_messages(limit=20)`` and as the bare statement that serves it, on
its own read-only aiosqlite connection (the same driver, the same one thread
hop as any async read and the same lowered thread priority as the store's
search connections; no joins, filters, snippets or context):

  messages_fts MATCH ? ORDER BY rank LIMIT 20            single, phrase, prefix, and
  messages_fts_trigram MATCH ? ORDER BY rank LIMIT 20    phrase-fallback, zero-hit

(phrase-fallback: a phrase whose words occur but never side by side, so
the store takes the trigram fallback of spec section 4.3; zero-hit: no
match anywhere, fallback included). Targets per class: store p95 < 25 ms
and store p95 <= 1.5 x bare p95. For the two fallback classes a third side,
timed in the same rounds, runs both statements such a query cannot skip in
one thread call: the exact statement (its empty answer is what sends the
store to the fallback), then the trigram one.

A fourth side, ``plain``, returns the same page as the store by hand, in
the same rounds: the ranked statement with FTS5's ``snippet()`` (after the
empty exact statement, for the two fallback classes), then one statement
for the page's rows, their sessions and each hit's neighbours, in one read
transaction on its own connection. The bare statement returns row ids
only; ``plain`` is what any store returning hits with snippets and context
windows has to run, so ``store / plain`` is the store's own overhead and
``plain / bare`` the price of the page itself.

Every side has a connection (and a thread) of its own. Sides sharing one
would find each other's pages in its cache (the same statements, moments
apart) while the store's search connection finds only its own, which the
writers' commits keep emptying: with the bare, floor and plain sides on
one connection the bare side was timed mostly warm, and the store's
ratios to it came out 0.2-0.4 ms worse for the sub-millisecond classes.

    python3 bench/search.py --suite zipf
    python3 bench/search.py --suite zipf --rounds 30 --json bench/out/zipf.json
    python3 bench/search.py --suite zipf --cpu-rounds 15   # also the reader-thread CPU of each side
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.search_workload import COLLOCATIONS, COMMON, SYLLABLES, TECH, pct

GENERATOR_VERSION = 1
SEED = 14_2024
SESSIONS = 100
PER_SESSION = 1_000
WORDS = 40
VOCABULARY = 5_000
WRITERS = 10
TARGET_P95_MS = 25.0
TARGET_RATIO = 1.5
LIMIT = 20


class ZipfCorpus:
    """40-word messages over ~5,000 words with Zipf frequencies (rank r has weight 1/r)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        vocab = list(dict.fromkeys(COMMON + TECH))
        make = random.Random(seed + 1)
        seen = set(vocab)
        while len(vocab) < VOCABULARY:
            word = "".join(make.choice(SYLLABLES) for _ in range(make.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                vocab.append(word)
        self.vocab = vocab
        self.cum = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))

    def text(self) -> str:
        words = self.rng.choices(self.vocab, cum_weights=self.cum, k=WORDS)
        if self.rng.random() < 0.33:
            at = self.rng.randrange(WORDS - 1)
            words[at : at + 2] = self.rng.choice(COLLOCATIONS)
        return " ".join(words)

    def message(self, i: int, ts: float) -> dict[str, Any]:
        return {"role": "user" if i % 2 == 0 else "assistant", "content": self.text(), "timestamp": ts}


def cache_path(out: Path) -> Path:
    return out / f"search-zipf-{SESSIONS}x{PER_SESSION}-s{SEED}-g{GENERATOR_VERSION}.db"


async def build(path: Path) -> None:
    from hermes_state import SessionDB

    tmp = path.with_suffix(".building")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    corpus = ZipfCorpus(SEED)
    started = time.perf_counter()
    base = time.time() - 90 * 86400
    async with SessionDB(tmp) as db:
        for first in range(0, SESSIONS, 10):
            batches = []
            for s in range(first, first + 10):
                sid = f"zipf-{s:03d}"
                await db.create_session(sid, "cli", model="model-a")
                t0 = base + s * 3600.0
                batches.append(db.append_messages_batch(sid, [corpus.message(i, t0 + i) for i in range(PER_SESSION)]))
            await asyncio.gather(*batches)
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{tmp}{suffix}")
        if src.exists():
            src.replace(Path(f"{path}{suffix}"))
    print(f"  built {SESSIONS * PER_SESSION:,} messages in {time.perf_counter() - started:.0f} s: {path}")


def _count(conn: Any, table: str, match: str) -> int:
    sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
    return int(conn.execute(sql, (match,)).fetchone()[0])


def pick_queries(conn: Any, corpus: ZipfCorpus) -> dict[str, list[str]]:
    """Query classes, chosen deterministically and checked against the corpus."""
    rng = random.Random(SEED + 7)
    vocab = corpus.vocab
    mid = [w for w in vocab[60:1500] if len(w) >= 4 and w.isalpha()]
    rare = [w for w in vocab[1500:4000] if len(w) >= 4]
    pairs = [(a, b) for a, b in zip(rng.sample(mid, 40), rng.sample(mid, 40)) if a != b]
    fallback = [f'"{a} {b}"' for a, b in pairs if _count(conn, "messages_fts", f'"{a} {b}"') == 0][:6]
    prefixes = []
    for word in rng.sample(mid, 30):
        # A prefix that expands to a handful of words, not to half the vocabulary.
        if 1 <= sum(1 for w in vocab if w.startswith(word[:4])) <= 8:
            prefixes.append(word[:4] + "*")
    return {
        "single": rng.sample(mid, 8),
        "phrase": [f'"{a} {b}"' for a, b in rng.sample(COLLOCATIONS, 6)],
        "prefix": prefixes[:6],
        "and": [f"{a} {b}" for a, b in zip(rng.sample(mid, 30), rng.sample(rare, 30)) if _count(conn, "messages_fts", f"{a} {b}")][:6],
        "phrase-fallback": fallback,
        "zero-hit": ["xylophonist", "qwertzuiop", "kubernetesqx", "zzgrathornel"],
    }


FALLBACK_CLASSES = ("phrase-fallback", "zero-hit")


_EXACT = f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rank LIMIT {LIMIT}"


def _serving_table(cls: str) -> str:
    """The index that serves class ``cls``: the trigram index for the fallback classes."""
    return "messages_fts_trigram" if cls in FALLBACK_CLASSES else "messages_fts"


def bare_statement(cls: str, query: str) -> tuple[str, str]:
    """(sql, match) of the one statement that serves ``query`` of class ``cls``."""
    from hermes_state.search_text.sanitize import (
        quote_for_substring_index,
        sanitize_fts5_query,
    )

    match = sanitize_fts5_query(query)
    table = _serving_table(cls)
    if cls in FALLBACK_CLASSES:
        match = quote_for_substring_index(match.strip('"').strip())
    return f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT {LIMIT}", match


def floor_statements(cls: str, query: str) -> list[tuple[str, str]] | None:
    """For a fallback class, the two statements the route cannot skip: the exact one (it finds
    nothing, which is how the store learns to fall back), then the trigram one; else None."""
    if cls not in FALLBACK_CLASSES:
        return None
    from hermes_state.search_text.sanitize import sanitize_fts5_query

    return [(_EXACT, sanitize_fts5_query(query)), bare_statement(cls, query)]


_PLAIN_RANKED = (
    "SELECT rowid, CAST(snippet({t}, -1, '>>>', '<<<', '...', 40) AS BLOB) FROM {t} WHERE {t} MATCH ? "
    f"ORDER BY rank LIMIT {LIMIT}"
)
_PLAIN_NEIGHBOUR = (
    "(SELECT json_array(x.role, substr(x.content, 1, 200)) FROM messages AS x WHERE x.session_id = m.session_id "
    "AND (x.timestamp, x.id) {op} (m.timestamp, m.id) ORDER BY x.timestamp {order}, x.id {order} LIMIT 1)"
)
_PLAIN_ROWS = (
    "SELECT m.id, m.session_id, m.role, m.content, m.timestamp, m.tool_name, s.source, s.model, s.started_at, "
    + _PLAIN_NEIGHBOUR.format(op="<", order="DESC") + ", " + _PLAIN_NEIGHBOUR.format(op=">", order="ASC")
    + " FROM messages AS m JOIN sessions AS s ON s.id = m.session_id "
    "WHERE (m.active = 1 OR m.compacted = 1) AND m.id IN ({marks})"
)
def plain_statements(
    cls: str, match: str, floor: list[tuple[str, str]] | None
) -> tuple[tuple[str, str] | None, str, str]:
    """(the floor's exact statement, or None; the ranked statement; its match) of a query's plain page.

    ``match`` is the bare statement's and ``floor`` the query's :func:`floor_statements`.
    """
    return (floor[0] if floor else None), _PLAIN_RANKED.format(t=_serving_table(cls)), match


def plain_page(raw: Any, exact: tuple[str, str] | None, ranked_sql: str, match: str) -> int:
    """The store's page by hand (see the module docstring); returns its row count."""
    raw.execute("BEGIN")
    try:
        if exact is not None:
            raw.execute(exact[0], (exact[1],)).fetchall()  # empty: what sends a fallback class to the trigram index
        ranked = raw.execute(ranked_sql, (match,)).fetchall()
        if not ranked:
            return 0
        ids = [row[0] for row in ranked]
        return len(raw.execute(_PLAIN_ROWS.format(marks=", ".join("?" * len(ids))), ids).fetchall())
    finally:
        raw.execute("COMMIT")


def _fetch_all(raw: Any, statements: list[tuple[str, str]]) -> None:
    for sql, match in statements:
        raw.execute(sql, (match,)).fetchall()


async def writer(db: Any, n: int, stop: asyncio.Event, interval: float, counter: list[int]) -> None:
    corpus = ZipfCorpus(SEED + 100 + n)
    sid = f"zipf-writer-{n:02d}-{time.time_ns()}"
    await db.create_session(sid, "bench-writer")
    while not stop.is_set():
        await db.append_message(sid, "user", corpus.text())
        counter[0] += 1
        await asyncio.sleep(interval)


def _fetch(raw: Any, sql: str, match: str) -> list[Any]:
    return list(raw.execute(sql, (match,)).fetchall())


async def measure(db: Any, conns: dict[str, Any], queries: dict[str, list[str]], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Every query through every side, ``rounds`` times; each side on its own connection (see :func:`run`)."""
    from hermes_state.sqlite.driver import run_on

    schedule = [(cls, q) for cls, qs in queries.items() for q in qs for _ in range(rounds)]
    rng = random.Random(SEED + 1)
    rng.shuffle(schedule)
    out: dict[str, dict[str, list[float]]] = {
        cls: {"store": [], "bare": [], "floor": [], "plain": [], "hits": [], "plain_hits": []} for cls in queries
    }
    for cls, q in schedule:
        sql, match = bare_statement(cls, q)
        floor = floor_statements(cls, q)
        plain = plain_statements(cls, match, floor)
        sides = ("store", "bare", "plain", "floor") if floor else ("store", "bare", "plain")
        # Random order within the round: no side always follows another
        # (a warmer cache, a writer's commit just landed).
        for side in rng.sample(sides, len(sides)):
            start = time.perf_counter()
            if side == "store":
                hits = await db.search_messages(q, limit=LIMIT)
            elif side == "floor":
                await run_on(conns["floor"], _fetch_all, floor)
            elif side == "plain":
                plain_hits = await run_on(conns["plain"], plain_page, *plain)
            else:
                await run_on(conns["bare"], _fetch, sql, match)
            out[cls][side].append((time.perf_counter() - start) * 1000)
        out[cls]["hits"].append(len(hits))
        out[cls]["plain_hits"].append(plain_hits)
        await asyncio.sleep(0)
    return out


async def prepare(args: argparse.Namespace) -> tuple[Path, Path]:
    """A private HERMES_HOME (search logging off) and the cached corpus, built if missing: (home, corpus)."""
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="hermes-bench-home-"))
    os.environ["HERMES_HOME"] = str(home)
    os.environ["HERMES_SEARCH_SLOW_MS"] = "1e12"
    cached = cache_path(out)
    if args.rebuild or not cached.exists():
        print(f"building the Zipf corpus: {SESSIONS} sessions x {PER_SESSION:,} messages of {WORDS} words")
        await build(cached)
    return home, cached


def reader_cpu(path: Path, queries: dict[str, list[str]], rounds: int) -> dict[str, tuple[float, float]]:
    """Per class: (bare, store) reader-thread CPU in ms, each query's fastest of ``rounds``, averaged.

    The search function and the bare statement run on one connection in
    this thread, no writers: what the store adds in work, whatever the
    machine's load does to latencies (``time.thread_time``).
    """
    from hermes_state.sqlite.driver import driver_module
    from hermes_state.sqlite.queries.search import search_messages_rows

    conn = driver_module().connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    rng = random.Random(SEED + 2)
    out: dict[str, tuple[float, float]] = {}
    try:
        for cls, qs in queries.items():
            fastest: dict[tuple[str, int], float] = {}
            for _ in range(rounds):
                for q in qs:
                    sql, match = bare_statement(cls, q)
                    for side in rng.sample((0, 1), 2):
                        start = time.thread_time()
                        if side:
                            search_messages_rows(conn, q, None, None, None, LIMIT, 0, None, False, True, True, False, 1e12)
                        else:
                            conn.execute(sql, (match,)).fetchall()
                        spent = time.thread_time() - start
                        fastest[(q, side)] = min(fastest.get((q, side), spent), spent)
            bare, store = (1000 * sum(fastest[(q, side)] for q in qs) / len(qs) for side in (0, 1))
            out[cls] = (bare, store)
    finally:
        conn.close()
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from hermes_state import SessionDB
    from hermes_state.sqlite.backend import _yield_cpu
    from hermes_state.sqlite.driver import open_connection, run_on

    home, cached = await prepare(args)
    out = cached.parent
    work = out / f"zipf-work-{os.getpid()}.db"
    shutil.copyfile(cached, work)
    # One connection (and thread) per side: two sides on one connection would
    # find each other's pages in its cache (the same statements, moments
    # apart), while the store's search connection finds only its own, which
    # the writers' commits keep emptying. The store's searches run on reader
    # threads at a lower CPU priority; each side's thread gets the same, so
    # the ratios measure our overhead rather than the scheduler's preference.
    conns: dict[str, Any] = {}
    for side in ("bare", "floor", "plain"):
        conns[side] = await open_connection(f"file:{work}?mode=ro", uri=True)
        await run_on(conns[side], _yield_cpu)
    try:
        queries = await run_on(conns["bare"], pick_queries, ZipfCorpus(SEED))
        async with SessionDB(work) as db:
            stop = asyncio.Event()
            appended = [0]
            tasks = [asyncio.create_task(writer(db, n, stop, args.interval, appended)) for n in range(WRITERS)]
            await asyncio.sleep(0.5)
            await measure(db, conns, queries, 1)  # warm every side's page cache
            started = time.perf_counter()
            result = await measure(db, conns, queries, args.rounds)
            elapsed = time.perf_counter() - started
            stop.set()
            await asyncio.gather(*tasks)
            info = await db.storage_info()
        cpu = reader_cpu(cached, queries, args.cpu_rounds) if args.cpu_rounds else {}
        return {"queries": queries, "result": result, "appends_per_s": appended[0] / max(elapsed, 1e-9), "info": info, "cpu": cpu}
    finally:
        for conn in conns.values():
            await conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(home, ignore_errors=True)


def report(args: argparse.Namespace, data: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    info = data["info"]
    print()
    print(
        f"search_messages(limit={LIMIT}) on {SESSIONS * PER_SESSION:,} Zipf messages ({VOCABULARY:,} words), "
        f"{WRITERS} writers at {data['appends_per_s']:,.0f} appends/s; {info['driver']} SQLite {info['sqlite_version']}, "
        f"{os.cpu_count()} CPUs; {args.rounds} rounds per query"
    )
    head = f"{'class':<16} {'hits':>5} | {'bare p50':>8} {'p95':>7} | {'store p50':>9} {'p95':>7} | {'p95 ratio':>9}  verdict"
    print(head)
    print("-" * len(head))
    ok = True
    summary: dict[str, Any] = {}
    for cls, values in data["result"].items():
        store95, bare95 = pct(values["store"], 95), pct(values["bare"], 95)
        ratio = store95 / bare95 if bare95 > 0 else float("inf")
        good = store95 < TARGET_P95_MS and ratio <= TARGET_RATIO
        ok &= good
        hits = sum(values["hits"]) / max(1, len(values["hits"]))
        print(
            f"{cls:<16} {hits:>5.1f} | {pct(values['bare'], 50):>8.2f} {bare95:>7.2f} | {pct(values['store'], 50):>9.2f} "
            f"{store95:>7.2f} | {ratio:>9.2f}  {'ok' if good else 'MISSES'}"
        )
        summary[cls] = {"store_p50": pct(values["store"], 50), "store_p95": store95, "bare_p50": pct(values["bare"], 50),
                        "bare_p95": bare95, "ratio_p95": ratio, "hits": hits, "queries": data["queries"][cls]}
    print(f"(milliseconds; targets: store p95 < {TARGET_P95_MS:.0f} ms and <= {TARGET_RATIO}x the bare statement's p95)")
    for cls, values in data["result"].items():
        if values.get("floor"):
            floor95 = pct(values["floor"], 95)
            store95, bare95 = summary[cls]["store_p95"], summary[cls]["bare_p95"]
            print(
                f"  {cls}: exact + trigram statements, one thread call (what the route cannot skip): p50 "
                f"{pct(values['floor'], 50):.2f} p95 {floor95:.2f}, {floor95 / bare95:.2f}x bare; store {store95 / floor95:.2f}x it"
            )
            summary[cls]["floor_p95"] = floor95
    print("the same page by hand (ranked statement with snippet(), then rows, sessions and neighbours; one read transaction):")
    for cls, values in data["result"].items():
        plain50, plain95 = pct(values["plain"], 50), pct(values["plain"], 95)
        store95, bare95 = summary[cls]["store_p95"], summary[cls]["bare_p95"]
        plain_hits = sum(values["plain_hits"]) / max(1, len(values["plain_hits"]))
        print(
            f"  {cls:<16} {plain_hits:>5.1f} hits | p50 {plain50:6.2f} p95 {plain95:6.2f} | {plain95 / bare95:.2f}x bare; "
            f"store {store95 / plain95:.2f}x it (p50 {summary[cls]['store_p50'] / plain50:.2f}x)"
        )
        summary[cls]["plain_p50"], summary[cls]["plain_p95"] = plain50, plain95
    if data.get("cpu"):
        print(f"reader-thread CPU per query, fastest of {args.cpu_rounds} (ms, no writers): class bare store ratio")
        for cls, (bare, store) in data["cpu"].items():
            print(f"  {cls:<16} {bare:7.3f} {store:7.3f} {store / bare:5.2f}x")
            summary[cls]["cpu_bare_ms"], summary[cls]["cpu_store_ms"] = bare, store
    return ok, summary
