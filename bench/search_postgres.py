"""``search_messages`` latency on PostgreSQL, against the bare statement that serves each query.

The store: a fresh schema of the server named by ``--dsn`` (default
``$HERMES_TEST_POSTGRES_DSN``), filled through the public API with one of
the Zipf corpora of the SQLite benchmarks, then ``vacuum()``-ed (merging
the GIN pending lists, as a store that has run for a while would have) and
dropped at the end:

  --suite large (default)  ``--messages`` (default 100,000) messages of
                           ``bench/search.py``'s generator: 100 per session,
                           lognormal lengths, a 30,000-word Zipf vocabulary,
                           tool rows, CJK text in about 3% of them
  --suite zipf             ``bench/search_zipf.py``'s corpus: 100 sessions x
                           1,000 messages of 40 words over 5,000 words

During the measurement 10 writer tasks append through the same store (one
append every ``--interval`` s each). Each query is timed twice in the same
round, under the same load: through ``search_messages(limit=20)``, and as
the bare statement that serves it, run on a plain asyncpg connection (no
snippets or row decoding; the statement that returns hits reads their
context windows, as the store's does):

  word classes       the store's relevance statement (``word_search_statement``:
                     the stored-vector GIN match, ts_rank over windows of
                     ``RANK_WINDOW`` matches, LIMIT 20), in the form the store
                     chooses from the column statistics (``word_search_form``)
  substring classes  the statements of the substring route, as the store runs
                     them: the word statement (no hit; not for CJK), for
                     short terms the ``ILIKE`` probe over the newest 1,000
                     rows, and unless that filled the page the ``ILIKE``
                     statement over every row (``substring_search_statement``; the pg_trgm index
                     serves it where the extension is installed); for
                     cjk-short the LIKE route's probe over the newest 1,000
                     rows holding CJK text and, unless that filled the page,
                     its statement over all of them

For word classes the table also shows ``full rank``: ``ts_rank`` over every
match, ``ORDER BY rank LIMIT 20`` on the stored vector, what relevance would
cost without the window. Classes: ``single`` (middling words), ``common``
(words in 30,000 messages or more), ``phrase``, ``prefix``, ``and`` (two
words), ``phrase-fallback`` (two words that never stand side by side: the
substring fallback), ``zero-hit`` and, in the large corpus, ``cjk`` (three
or more CJK characters: trigram route) and ``cjk-short`` (two-character CJK
words: an ``ILIKE`` scan no trigram index can serve). Target per class:
store p95 under 25 ms.

    python3 bench/search.py --backend postgres [--suite zipf] [--rounds 10] [--interval 0.05] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
import uuid
from typing import Any

from bench.search_workload import COLLOCATIONS, SEED, Corpus, pct

TARGET_P95_MS = 25.0
WRITERS = 10
LIMIT = 20
COMMON_HITS = 30_000
SUBSTRING_CLASSES = ("phrase-fallback", "zero-hit", "cjk", "cjk-short")


def _dsns(dsn: str, schema: str) -> tuple[str, str]:
    """(admin ``postgresql://`` DSN, store DSN pinned to ``schema``)."""
    from tests.postgres_support import store_dsn

    admin = "postgresql://" + dsn.split("://", 1)[1]
    return admin, store_dsn(admin, schema)


# ---------------------------------------------------------------------- corpora


class _Large:
    """``bench/search.py``'s corpus: ``messages`` messages, 100 per session."""

    name = "large"

    def __init__(self, messages: int) -> None:
        self.corpus = Corpus(SEED)
        self.sessions = max(1, messages // 100)
        self.per = messages // self.sessions

    def vocab(self) -> list[str]:
        return self.corpus.vocab

    def message(self, i: int, ts: float) -> dict[str, Any]:
        return self.corpus.message(i, ts)

    def writer_text(self, rng_seed: int) -> Any:
        corpus = Corpus(rng_seed)
        return lambda: corpus.text("user")

    def describe(self) -> str:
        return f"{self.sessions * self.per:,} messages of bench/search.py's generator (100 per session)"


class _Zipf:
    """``bench/search_zipf.py``'s corpus: 100 sessions x 1,000 messages of 40 words."""

    name = "zipf"

    def __init__(self) -> None:
        from bench.search_zipf import PER_SESSION, SEED as ZSEED, SESSIONS, ZipfCorpus

        self.corpus = ZipfCorpus(ZSEED)
        self.sessions, self.per = SESSIONS, PER_SESSION

    def vocab(self) -> list[str]:
        return self.corpus.vocab

    def message(self, i: int, ts: float) -> dict[str, Any]:
        return self.corpus.message(i, ts)

    def writer_text(self, rng_seed: int) -> Any:
        from bench.search_zipf import ZipfCorpus

        corpus = ZipfCorpus(rng_seed)
        return corpus.text

    def describe(self) -> str:
        return f"{self.sessions * self.per:,} messages of bench/search_zipf.py's corpus (40 words, 5,000-word vocabulary)"


async def _build(db: Any, corpus: _Large | _Zipf) -> float:
    base = time.time() - 365 * 86400
    started = time.perf_counter()

    async def one(s: int) -> None:
        sid = f"bench-{s:06d}"
        await db.create_session(sid, ["cli", "telegram", "discord", "api"][s % 4], model=f"model-{s % 3}")
        t0 = base + s * (365 * 86400 / corpus.sessions)
        messages = [corpus.message(i, t0 + i * 7.0) for i in range(corpus.per)]
        for at in range(0, len(messages), 1000):
            await db.append_messages_batch(sid, messages[at : at + 1000])

    wave = 64 if corpus.per <= 100 else 10
    for first in range(0, corpus.sessions, wave):
        await asyncio.gather(*(one(s) for s in range(first, min(first + wave, corpus.sessions))))
    return time.perf_counter() - started


# ---------------------------------------------------------------------- queries


async def _count(conn: Any, text: str) -> int:
    from hermes_state.postgres.queries.search import tsquery_parts
    from hermes_state.search_text.sanitize import sanitize_fts5_query

    tsq, params = tsquery_parts(sanitize_fts5_query(text))
    if tsq is None:  # "and", "or", "not" are operators, not words
        return 0
    return int(await conn.fetchval(f"SELECT count(*) FROM messages WHERE search_vector @@ ({tsq})", *params))


async def pick_queries(conn: Any, corpus: _Large | _Zipf) -> dict[str, list[str]]:
    """Query classes, chosen deterministically from the corpus vocabulary and checked against the store."""
    rng = random.Random(SEED + 7)
    vocab = corpus.vocab()
    mid = [w for w in vocab[60:1500] if len(w) >= 4 and w.isalpha()]
    rare = [w for w in vocab[1500:4000] if len(w) >= 4]
    common = [w for w in vocab[:40] if await _count(conn, w) >= COMMON_HITS][:4]
    pairs = [(a, b) for a, b in zip(rng.sample(mid, 40), rng.sample(mid, 40)) if a != b]
    fallback = [f'"{a} {b}"' for a, b in pairs if await _count(conn, f'"{a} {b}"') == 0][:6]
    prefixes = [w[:4] + "*" for w in rng.sample(mid, 30) if 1 <= sum(1 for v in vocab if v.startswith(w[:4])) <= 8][:6]
    both = [f"{a} {b}" for a, b in zip(rng.sample(mid, 30), rng.sample(rare, 30))]
    classes = {
        "single": rng.sample(mid, 8),
        "common": common,
        "phrase": [f'"{a} {b}"' for a, b in rng.sample(COLLOCATIONS, 6)],
        "prefix": prefixes,
        "and": [q for q in both if await _count(conn, q)][:6],
        "phrase-fallback": fallback,
        "zero-hit": ["xylophonist", "qwertzuiop", "kubernetesqx", "zzgrathornel"],
    }
    if corpus.name == "large":
        classes["cjk"] = ["数据库连接", "設定ファイル", "部署到生产"]
        classes["cjk-short"] = ["서버 오류", "错误"]
    return classes


def bare_statements(
    cls: str, query: str, bitmap: bool = False
) -> tuple[list[tuple[str, list[Any]]], tuple[str, list[Any]] | None]:
    """(the statements the store runs for ``query``, in order; the full-rank reference or None).

    ``bitmap``: the form of the relevance statement the store chooses (``word_search_form``).

    A substring class runs the word statement (no hit), then the probe over
    the newest rows, then, unless the probe filled the page, the full
    substring statement: :func:`run_bare` follows the same steps.
    """
    from hermes_state.postgres.queries.search import (
        short_terms,
        like_scan_statement,
        substring_search_statement,
        tsquery_parts,
        word_search_statement,
    )
    from hermes_state.search_text.sanitize import contains_cjk, sanitize_fts5_query

    # The store reads the hits' context windows in the statement that returns them.
    word = word_search_statement(query, LIMIT, bitmap=bitmap, context=cls not in SUBSTRING_CLASSES)
    if cls == "cjk-short":
        return [like_scan_statement(query, LIMIT, True, True), like_scan_statement(query, LIMIT, False, True)], None
    if cls in SUBSTRING_CLASSES:
        probe = substring_search_statement(query, LIMIT, probe=True, context=True)
        full = substring_search_statement(query, LIMIT, context=True)
        assert probe is not None and full is not None
        steps = [probe, full] if short_terms(sanitize_fts5_query(query).strip('"').strip()) else [full]
        return (steps if contains_cjk(query) or word is None else [word, *steps]), None
    assert word is not None
    tsq, params = tsquery_parts(sanitize_fts5_query(query))
    full_rank = (
        f"SELECT id FROM messages WHERE search_vector @@ ({tsq}) "
        f"ORDER BY ts_rank(search_vector, ({tsq})) DESC, id LIMIT {LIMIT}"
    )
    return [word], (full_rank, params)


async def run_bare(conn: Any, steps: list[tuple[str, list[Any]]]) -> None:
    """Run ``steps`` as the store does: stop at the first that fills a page (the last always runs if reached)."""
    for sql, params in steps:
        if len(await conn.fetch(sql, *params)) == LIMIT:
            return


# ---------------------------------------------------------------------- timing


async def _writer(db: Any, corpus: _Large | _Zipf, n: int, stop: asyncio.Event, interval: float, counter: list[int]) -> None:
    text = corpus.writer_text(SEED + 100 + n)
    sid = f"pg-writer-{n:02d}-{time.time_ns()}"
    await db.create_session(sid, "bench-writer")
    while not stop.is_set():
        await db.append_message(sid, "user", text())
        counter[0] += 1
        await asyncio.sleep(interval)


async def _timed(coro: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await coro
    return (time.perf_counter() - start) * 1000, result


async def measure(db: Any, conn: Any, queries: dict[str, list[str]], rounds: int, full_rank: bool) -> dict[str, Any]:
    """Per class: store, bare and full-rank latencies (ms) and hit counts, interleaved query by query."""
    schedule = [(cls, q) for cls, qs in queries.items() for q in qs for _ in range(rounds)]
    random.Random(SEED + 1).shuffle(schedule)
    out: dict[str, dict[str, list[float]]] = {c: {"store": [], "bare": [], "full": [], "hits": []} for c in queries}
    from hermes_state.postgres.queries.search import word_search_form

    for cls, q in schedule:
        steps, full = bare_statements(cls, q, await word_search_form(conn, q, LIMIT))
        ms, hits = await _timed(db.search_messages(q, limit=LIMIT))
        out[cls]["store"].append(ms)
        out[cls]["hits"].append(len(hits))
        out[cls]["bare"].append((await _timed(run_bare(conn, steps)))[0])
        if full is not None and full_rank:
            out[cls]["full"].append((await _timed(conn.fetch(full[0], *full[1])))[0])
        await asyncio.sleep(0)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg  # type: ignore[import-untyped]

    from hermes_state.postgres import SessionDB

    corpus: _Large | _Zipf = _Zipf() if args.suite == "zipf" else _Large(args.messages)
    dsn = args.dsn or os.environ.get("HERMES_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    schema = f"hs_bench_{uuid.uuid4().hex}"
    admin, store = _dsns(dsn, schema)
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    os.environ["HERMES_SEARCH_SLOW_MS"] = "1e12"
    try:
        db = SessionDB(store)
        try:
            print(f"building {corpus.describe()} in schema {schema} ...", flush=True)
            built = await _build(db, corpus)
            await db.vacuum()
            info = await db.storage_info()
            await conn.execute(f'SET search_path TO "{schema}"')
            # As the store's searches do (queries.search.CUSTOM_PLANS), for the whole session here.
            await conn.execute("SET plan_cache_mode = force_custom_plan")
            queries = await pick_queries(conn, corpus)
            stop = asyncio.Event()
            appended = [0]
            tasks = [asyncio.create_task(_writer(db, corpus, n, stop, args.interval, appended)) for n in range(WRITERS)]
            try:
                await asyncio.sleep(0.5)
                await measure(db, conn, queries, 1, False)  # warm the caches of both paths
                before, started = appended[0], time.perf_counter()
                result = await measure(db, conn, queries, args.rounds, True)
                rate = (appended[0] - before) / max(time.perf_counter() - started, 1e-9)
            finally:
                stop.set()
                await asyncio.gather(*tasks)
        finally:
            await db.close()
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    return {"built_s": built, "queries": queries, "result": result, "appends_per_s": rate, "info": info,
            "corpus": corpus.describe()}


def report(args: argparse.Namespace, data: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Print the table; returns (every class under target, summary)."""
    from hermes_state.postgres.queries.search import RANK_WINDOW

    info = data["info"]
    print()
    print(
        f"PostgreSQL {info.get('server_version')} search_messages(limit={LIMIT}) on {data['corpus']} "
        f"(built in {data['built_s']:.0f} s); {WRITERS} writers at {data['appends_per_s']:,.0f} appends/s; "
        f"substring index: {info.get('substring_index')}; rank window {RANK_WINDOW}; {args.rounds} rounds per query"
    )
    head = (
        f"{'class':<16} {'hits':>5} | {'bare p50':>8} {'p95':>7} | {'store p50':>9} {'p95':>7} | "
        f"{'ratio':>5} | {'full rank p95':>13}  verdict (store p95 < {TARGET_P95_MS:g} ms)"
    )
    print(head)
    print("-" * len(head))
    ok = True
    summary: dict[str, Any] = {}
    for cls, values in data["result"].items():
        store95, bare95 = pct(values["store"], 95), pct(values["bare"], 95)
        full95 = pct(values["full"], 95) if values["full"] else None
        ratio = store95 / bare95 if bare95 > 0 else float("inf")
        good = store95 < TARGET_P95_MS
        ok &= good
        hits = sum(values["hits"]) / max(1, len(values["hits"]))
        full_text = f"{full95:>13.2f}" if full95 is not None else f"{'-':>13}"
        print(
            f"{cls:<16} {hits:>5.1f} | {pct(values['bare'], 50):>8.2f} {bare95:>7.2f} | {pct(values['store'], 50):>9.2f} "
            f"{store95:>7.2f} | {ratio:>5.2f} | {full_text}  {'ok' if good else 'MISSED'}"
        )
        summary[cls] = {"store_p50": pct(values["store"], 50), "store_p95": store95, "bare_p50": pct(values["bare"], 50),
                        "bare_p95": bare95, "full_rank_p95": full95, "ratio_p95": ratio, "hits": hits,
                        "queries": data["queries"][cls]}
    print("(milliseconds; bare = the statement the store runs for that class, on a plain connection;")
    print(" full rank = ts_rank over every match, what relevance would cost without the rank window)")
    return ok, summary


def main(args: argparse.Namespace) -> int:
    """Entry point used by ``bench/search.py --backend postgres``; returns the exit status."""
    import json
    from pathlib import Path

    if args.messages == 1_000_000:  # the SQLite default; the PostgreSQL target is stated at 100k
        args.messages = 100_000
    data = asyncio.run(run(args))
    ok, summary = report(args, data)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    return 1 if args.check and not ok else 0
