"""Append/read throughput of ``hermes_state.SessionDB`` against the SQLite limits for the same rows.

Shapes (counts at ``--scale 1``):

  (a) 50 tasks x 200 awaited ``append_message`` calls, each task its own session
  (b) one task, 5,000 awaited ``append_message`` calls
  (c) ``append_messages_batch`` of 10,000 messages
  (d) ``get_messages`` of a 10,000-message session (the one written by (c))

Every contender writes the same rows to its own fresh file with the store's
schema (FTS5 tables and triggers included), WAL and ``synchronous=FULL``.
The limits use the plain synchronous driver, with the counter update the
store makes:

  executemany, 1 txn       one statement per row, one transaction (the old write path)
  1 statement, 1 txn       every row in one INSERT statement, one transaction
  1 stmt per 50 + commit   one INSERT per group of 50 rows, each group committed
                           (the limit of the concurrent shape: 50 callers, one commit)
  1 commit per row         one transaction per row ((b) only: the sequential limit)
  plain fetchall + decode  (d): the same rows of the store's file read with a plain
                           fetchall and decoded into the same dicts; the store's and
                           the plain read alternate, 5 pairs on warm connections

A "paired" line repeats (b) with the limit and the store alternating in ten
segments of the same run (same load, same file growth for both), a ratio
that drift between two separate runs cannot tilt. The same segments also
time the limit's transaction run on an aiosqlite thread, one awaited round
trip per row: the floor of any store whose writer is a thread off the event
loop, printed as a ratio of the limit and the store as a ratio of it.

``--naive`` adds the old naive contender (one aiosqlite connection behind an
``asyncio.Lock``, one transaction per write). A last step measures the
``tracemalloc`` peak of one ``append_messages_batch`` of 100,000 messages
against the size of its input list.

Targets (store figure / reference): (a) >= 0.70 of "1 stmt per 50 + commit";
(b) >= 0.75 of "1 commit per row"; (c) >= 0.70 of "1 statement, 1 txn";
(d) >= 1.0 of the plain read; memory peak <= 2x the input list.
``--check`` exits 1 when a target fails.

Run from the repository root::

    python3 bench/append.py                 # full run, prints the table
    python3 bench/append.py --scale 0.1     # quick smoke run
    python3 bench/append.py --shapes b --memory-rows 0   # only the sequential shape (and its paired line)
    python3 bench/append.py --check --json bench/out/append.json
    python3 bench/append.py --backend postgres   # the same shapes on PostgreSQL (bench/append_postgres.py)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import tracemalloc
from pathlib import Path
from typing import Any, Callable

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from bench.append_workload import ROLE, SEED, Workload, make_texts, run_async_contender, shape_items  # noqa: E402

# --------------------------------------------------------------------------- data

_CONTENT_COLUMNS = (
    "session_id, role, content, tool_call_id, tool_calls, tool_name, effect_disposition, timestamp, "
    "token_count, finish_reason, reasoning, reasoning_content, reasoning_details, codex_reasoning_items, "
    "codex_message_items, platform_message_id, observed, api_content, display_kind, display_metadata"
)
INSERT_SQL = f"INSERT INTO messages ({_CONTENT_COLUMNS}) VALUES ({', '.join('?' * 20)})"
COUNT_SQL = (  # the store's counter update (a plain-text row adds no tool calls)
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
    "tool_call_count = COALESCE(tool_call_count, 0) + 0 WHERE id = ?"
)
SESSION_SQL = "INSERT INTO sessions (id, source, model, started_at) VALUES (?, 'bench', 'm', ?)"
SELECT_SQL = "SELECT * FROM messages WHERE session_id = ? ORDER BY id"


def row(session_id: str, role: str, content: str, ts: float) -> tuple:
    """One messages row, in ``INSERT_SQL`` column order (what a plain-text append writes)."""
    return (session_id, role, content, None, None, None, None, ts, None, None, None, None, None, None,
            None, None, 0, None, None, None)


# --------------------------------------------------------------------------- schema / files

def _schema_scripts() -> list[str]:
    from hermes_state.sqlite import schema as s

    scripts = [s.SCHEMA_SQL]
    # The store also creates these indexes on open; the same schema means the same insert cost.
    for name in ("DEFERRED_INDEX_SQL", "PLATFORM_INDEX_SQL", "TITLE_INDEX_SQL"):
        sql = getattr(s, name, None)
        if sql:
            scripts.append(sql if sql.rstrip().endswith(";") else sql + ";")
    scripts.append(s.FTS_TABLES_SQL)
    scripts.append(s.fts_triggers_sql())
    return scripts


def _sync_setup(conn: Any) -> None:
    from hermes_state.sqlite.schema import SCHEMA_VERSION

    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not set WAL (got {mode})")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    for script in _schema_scripts():
        conn.executescript(script)
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))


async def _async_setup(conn: Any) -> None:
    from hermes_state.sqlite.driver import run_on

    await run_on(conn, _sync_setup)


def inspect_file(path: Path) -> dict[str, Any]:
    """Row counts (messages, counters, both FTS indexes), journal mode and schema of a bench file."""
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(path))
    try:
        q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        info = {
            "messages": q("SELECT count(*) FROM messages"),
            "message_count_sum": q("SELECT COALESCE(sum(message_count), 0) FROM sessions"),
            "journal_mode": str(q("PRAGMA journal_mode")).lower(),
            "schema": sorted(
                (t, n, " ".join((sql or "").split()))
                for t, n, sql in conn.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            ),
        }
        for fts in ("messages_fts", "messages_fts_trigram"):
            try:
                info[fts] = q(f"SELECT count(*) FROM {fts}_docsize")
            except Exception:
                info[fts] = None
        return info
    finally:
        conn.close()


# --------------------------------------------------------------------------- limits (plain sync driver)

# The limits write each row's values only where it has one (NULL literals for
# the rest, as the store does). One statement for any number of rows: the
# rows travel as one JSON parameter (the bench's rows are plain text, which
# JSON carries exactly). A group small enough for bound parameters uses a
# multi-row VALUES list instead, which is cheaper.
_COLUMN_NAMES = _CONTENT_COLUMNS.split(", ")
JSON_COUNT_SQL = (
    "UPDATE sessions SET message_count = COALESCE(message_count, 0) + j.value->>1, "
    "tool_call_count = COALESCE(tool_call_count, 0) + 0 FROM json_each(?) AS j WHERE sessions.id = j.value->>0"
)


def _valued_columns(rows: list[tuple]) -> list[int]:
    return [i for i, col in enumerate(zip(*rows)) if col.count(None) != len(rows)]


def _json_insert(conn: Any, rows: list[tuple]) -> None:
    keep = _valued_columns(rows)
    select = ", ".join(f"value->>{keep.index(i)}" if i in keep else "NULL" for i in range(len(_COLUMN_NAMES)))
    payload = json.dumps([[r[i] for i in keep] for r in rows])
    conn.execute(f"INSERT INTO messages ({_CONTENT_COLUMNS}) SELECT {select} FROM json_each(?)", (payload,))


def _values_insert(conn: Any, rows: list[tuple]) -> None:
    keep = _valued_columns(rows)
    one = "(" + ", ".join("?" if i in keep else "NULL" for i in range(len(_COLUMN_NAMES))) + ")"
    sql = f"INSERT INTO messages ({_CONTENT_COLUMNS}) VALUES " + ", ".join([one] * len(rows))
    conn.execute(sql, [r[i] for r in rows for i in keep])


def _counts(rows: list[tuple]) -> list[tuple[int, str]]:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[0]] = counts.get(r[0], 0) + 1
    return [(n, sid) for sid, n in counts.items()]


def _write_rowwise(conn: Any, rows: list[tuple]) -> None:
    """Per-row statements (``executemany``) in one transaction: what the store did before issue 14."""
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(INSERT_SQL, rows)
    conn.executemany(COUNT_SQL, _counts(rows))
    conn.execute("COMMIT")


def _one_statement(conn: Any, rows: list[tuple]) -> None:
    (_values_insert if len(rows) * len(_COLUMN_NAMES) <= 999 else _json_insert)(conn, rows)
    conn.execute(JSON_COUNT_SQL, (json.dumps([(sid, n) for n, sid in _counts(rows)]),))


def _write_one_statement(conn: Any, rows: list[tuple]) -> None:
    """Every row in one INSERT statement (plus one counter UPDATE), one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    _one_statement(conn, rows)
    conn.execute("COMMIT")


def _write_groups(conn: Any, rows: list[tuple], group: int = 50) -> None:
    """One INSERT statement per group of ``group`` rows, each group its own committed transaction."""
    for start in range(0, len(rows), group):
        conn.execute("BEGIN IMMEDIATE")
        _one_statement(conn, rows[start : start + group])
        conn.execute("COMMIT")


def _write_per_row_commit(conn: Any, rows: list[tuple]) -> None:
    """One committed transaction per row: the floor for one caller awaiting each append."""
    for r in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT_SQL, r)
        conn.execute(COUNT_SQL, (1, r[0]))
        conn.execute("COMMIT")


LIMITS: dict[str, tuple[str, Callable[[Any, list[tuple]], None]]] = {
    "rowwise": ("executemany, 1 txn", _write_rowwise),
    "one_stmt": ("1 statement, 1 txn", _write_one_statement),
    "group50": ("1 stmt per 50 + commit", _write_groups),
    "row_commit": ("1 commit per row", _write_per_row_commit),
}
# Which limits each write shape is measured against (a commit per row is the
# sequential shape's floor only; elsewhere it would just add minutes).
SHAPE_LIMITS = {
    "a": ("rowwise", "one_stmt", "group50"),
    "b": ("rowwise", "one_stmt", "group50", "row_commit"),
    "c": ("rowwise", "one_stmt", "group50"),
}


def _limit_write(path: Path, sessions: list[str], items: list[tuple[str, int, str]], write: Callable) -> float:
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        _sync_setup(conn)
        now = time.time()
        conn.executemany(SESSION_SQL, [(s, now) for s in sessions])
        t0 = time.perf_counter()
        rows = [row(sid, ROLE[i % 2], text, time.time()) for sid, i, text in items]
        write(conn, rows)
        return time.perf_counter() - t0
    finally:
        conn.close()


READ_SQL = "SELECT * FROM messages WHERE session_id = ? AND active = 1 ORDER BY id"


def plain_read(conn: Any, sid: str) -> tuple[float, list[dict]]:
    """A plain ``fetchall`` of the session's rows, decoded into the dicts ``get_messages`` returns."""
    from hermes_state.encoding import decode_message_row

    t0 = time.perf_counter()
    cur = conn.execute(READ_SQL, (sid,))
    cols = [d[0] for d in cur.description]
    out = [decode_message_row(dict(zip(cols, r))) for r in cur.fetchall()]
    return time.perf_counter() - t0, out


async def paired_reads(SessionDB: Any, path: Path, sid: str, pairs: int = 5) -> tuple[float, float, bool]:
    """Median seconds of ``get_messages`` and of the plain read, timed in alternating pairs on warm connections.

    Returns (store seconds, plain seconds, whether both returned the same dicts).
    """
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(str(path), isolation_level=None, check_same_thread=False)
    db = SessionDB(str(path))
    try:
        _, plain = plain_read(conn, sid)  # untimed warm-up of both connections
        same = await db.get_messages(sid) == plain
        store_times, plain_times = [], []
        for _ in range(pairs):
            # Each read starts from a collected heap: 10,000 fresh dicts can set off
            # a full collection of everything the run has kept, in either read.
            gc.collect()
            plain_times.append(plain_read(conn, sid)[0])
            gc.collect()
            t0 = time.perf_counter()
            got = await db.get_messages(sid)
            store_times.append(time.perf_counter() - t0)
            # Freed after the clock stops, as the plain read's result is: freeing
            # 10,000 dicts takes ~10 ms and is no part of either read.
            del got
        return statistics.median(store_times), statistics.median(plain_times), same
    finally:
        conn.close()
        await db.close()


async def paired_b(SessionDB: Any, w: Workload, d: Path, segments: int = 10) -> tuple[float, float, float]:
    """Seconds of the store's shape (b), of its one-commit-per-row limit, and of that limit with one
    thread round trip per row, timed in alternating segments.

    The 5,000 appends are cut into ``segments`` slices; each slice is written
    by every contender back to back (the order rotates), so all see the same
    machine load and the same file growth, and drift between separate runs
    cannot tilt the ratios. The third contender runs the limit's own
    transaction per row on an aiosqlite connection's thread, awaited from the
    event loop: the floor of any store that keeps SQLite off the loop (the
    design's writer thread), which the store cannot beat.
    """
    from hermes_state.sqlite.driver import driver_module, open_connection, run_on

    conn = driver_module().connect(str(d / "paired-limit.db"), isolation_level=None, check_same_thread=False)
    hop = await open_connection(str(d / "paired-hop.db"))
    db = SessionDB(str(d / "paired-store.db"))
    try:
        _sync_setup(conn)
        conn.execute(SESSION_SQL, ("b", time.time()))
        await run_on(hop, _sync_setup)
        await run_on(hop, lambda raw: raw.execute(SESSION_SQL, ("b", time.time())))
        await db.create_session("b", source="bench", model="m")
        texts = list(enumerate(w.texts_b))
        size = -(-len(texts) // segments)
        spent = {"store": 0.0, "limit": 0.0, "hop": 0.0}
        order = ["limit", "store", "hop"]
        for k, start in enumerate(range(0, len(texts), size)):
            part = texts[start : start + size]
            for who in order[k % 3 :] + order[: k % 3]:
                t0 = time.perf_counter()
                if who == "limit":
                    _write_per_row_commit(conn, [row("b", ROLE[i % 2], x, time.time()) for i, x in part])
                elif who == "hop":
                    for i, x in part:
                        await run_on(hop, _write_per_row_commit, [row("b", ROLE[i % 2], x, time.time())])
                else:
                    for i, x in part:
                        await db.append_message("b", ROLE[i % 2], x)
                spent[who] += time.perf_counter() - t0
        return spent["store"], spent["limit"], spent["hop"]
    finally:
        conn.close()
        await hop.close()
        await db.close()


async def run_limits(w: Workload, d: Path, keys: str = "abc") -> dict[str, dict[str, float]]:
    """Seconds per (limit, shape) for the shapes in ``keys``, each on a fresh file."""
    res: dict[str, dict[str, float]] = {name: {} for name in LIMITS}
    for shape, names in SHAPE_LIMITS.items():
        if shape not in keys:
            continue
        sessions, items = shape_items(w, shape)
        for name in names:
            res[name][shape] = _limit_write(d / f"{name}-{shape}.db", sessions, items, LIMITS[name][1])
    return res


# --------------------------------------------------------------------------- naive (aiosqlite + asyncio.Lock)

class NaiveStore:
    """One aiosqlite connection, one transaction per write, serialised by an asyncio.Lock."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> "NaiveStore":
        from hermes_state.sqlite.driver import open_connection

        conn = await open_connection(str(path))
        await _async_setup(conn)
        return cls(conn)

    async def create_session(self, sid: str) -> None:
        async with self.lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            await self.conn.execute(SESSION_SQL, (sid, time.time()))
            await self.conn.execute("COMMIT")

    async def append_message(self, sid: str, role: str, content: str) -> int:
        async with self.lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                cur = await self.conn.execute(INSERT_SQL, row(sid, role, content, time.time()))
                await self.conn.execute(COUNT_SQL, (1, sid))
                await self.conn.execute("COMMIT")
            except BaseException:
                await self.conn.execute("ROLLBACK")
                raise
            return cur.lastrowid

    async def append_messages_batch(self, sid: str, messages: list[dict]) -> int:
        async with self.lock:
            rows = [row(sid, m["role"], m["content"], time.time()) for m in messages]
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                await self.conn.executemany(INSERT_SQL, rows)
                await self.conn.execute(COUNT_SQL, (len(rows), sid))
                await self.conn.execute("COMMIT")
            except BaseException:
                await self.conn.execute("ROLLBACK")
                raise
            return len(rows)

    async def get_messages(self, sid: str) -> list[dict]:
        cur = await self.conn.execute(SELECT_SQL, (sid,))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in await cur.fetchall()]

    async def close(self) -> None:
        await self.conn.close()


async def run_naive(w: Workload, d: Path, errors: dict[str, str], keys: str = "abc") -> dict[str, float]:
    return await run_async_contender(
        "naive", NaiveStore.open, lambda db, sid: db.create_session(sid), w, d, errors, keys
    )


def load_store() -> tuple[Any, str | None]:
    try:
        import hermes_state

        return hermes_state.SessionDB, None
    except Exception as exc:  # ImportError, AttributeError while the package is being written
        return None, f"{type(exc).__name__}: {exc}"


async def run_store(
    SessionDB: Any, w: Workload, d: Path, errors: dict[str, str], keys: str = "abc"
) -> dict[str, float]:
    async def opener(path: Path) -> Any:
        return SessionDB(str(path))

    res = await run_async_contender(
        "store", opener, lambda db, sid: db.create_session(sid, source="bench", model="m"), w, d, errors, keys
    )
    if "d" in res:
        # The read limit: the same rows of the same file, read plainly and decoded into the same
        # dicts; the two reads alternate so both see the same machine load.
        res["d"], res["plain_read"], same = await paired_reads(SessionDB, d / "store-c.db", "c")
        if not same:
            errors["store:d"] = "get_messages and the plain read returned different dicts"
    return res


# --------------------------------------------------------------------------- memory

async def measure_memory(SessionDB: Any, n: int, d: Path) -> dict[str, float]:
    """``tracemalloc`` peak of one ``append_messages_batch`` of ``n`` messages, against the input list's size."""
    db = SessionDB(str(d / "memory.db"))
    try:
        await db.create_session("m", source="bench", model="m")
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            texts = make_texts(n, SEED + 4)
            messages = [{"role": ROLE[i % 2], "content": x} for i, x in enumerate(texts)]
            del texts
            input_bytes = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.reset_peak()
            start = tracemalloc.get_traced_memory()[0]
            written = await db.append_messages_batch("m", messages)
            peak = tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()
        if written != n:
            raise AssertionError(f"append_messages_batch wrote {written}, expected {n}")
        return {"rows": n, "input_bytes": input_bytes, "peak_bytes": peak, "ratio": peak / input_bytes}
    finally:
        await db.close()


# --------------------------------------------------------------------------- report

SHAPES = {
    "a": "(a) 50 tasks x {per_task} append_message",
    "b": "(b) 1 task x {single} append_message",
    "c": "(c) append_messages_batch of {batch}",
    "d": "(d) get_messages of {batch}",
}
# (shape, reference, minimum store/reference ratio); "plain_read" is the read limit.
TARGETS = [
    ("a", "group50", 0.70),
    ("b", "row_commit", 0.75),
    ("c", "one_stmt", 0.70),
    ("d", "plain_read", 1.00),
]
MEMORY_LIMIT = 2.0


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def build_report(w: Workload, results: dict[str, dict[str, float]]) -> tuple[dict, list[str]]:
    """Rows per second of every contender per shape, and the table that shows store / reference."""
    counts = {"a": w.rows_a, "b": w.single, "c": w.batch, "d": w.batch}
    refs: dict[str, list[tuple[str, str]]] = {
        shape: [(name, LIMITS[name][0]) for name in names] for shape, names in SHAPE_LIMITS.items()
    }
    refs["d"] = [("plain_read", "plain fetchall + decode")]
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for shape, n in counts.items():
        figures[shape] = {}
        who_list = ["store", "naive"] + [name for name, _ in refs[shape]]
        for who in who_list:
            key = who
            secs = results.get(who, {}).get(shape)
            if who == "plain_read":
                secs = results.get("store", {}).get("plain_read")
            if secs is not None:
                figures[shape][key] = {"rows": n, "seconds": secs, "rows_per_s": n / secs if secs > 0 else float("inf")}
    lines = []
    head = f"{'shape':<38} {'contender':<26} {'rows':>7} {'seconds':>8} {'rows/s':>10} {'store/this':>10}"
    lines += [head, "-" * len(head)]
    for shape in counts:
        title = SHAPES[shape].format(per_task=w.per_task, single=w.single, batch=w.batch)
        store = figures[shape].get("store")
        rows = [("store", "store")] + ([("naive", "naive (lock + txn per write)")] if "naive" in figures[shape] else [])
        for who, label in rows + refs[shape]:
            f = figures[shape].get(who)
            left = title if who == "store" else ""
            if f is None:
                lines.append(f"{left:<38} {label:<26} {'-':>7} {'n/a':>8} {'n/a':>10}")
                continue
            ratio = f"{store['rows_per_s'] / f['rows_per_s']:.2f}x" if store and who != "store" else ""
            lines.append(
                f"{left:<38} {label:<26} {f['rows']:>7} {f['seconds']:>8.3f} {_fmt_rate(f['rows_per_s']):>10} {ratio:>10}"
            )
    return figures, lines


def evaluate_targets(figures: dict, memory: dict[str, float] | None) -> list[dict]:
    out = []
    for shape, ref, minimum in TARGETS:
        a, b = figures[shape].get("store"), figures[shape].get(ref)
        ratio = a["rows_per_s"] / b["rows_per_s"] if a and b else None
        status = "N/A" if ratio is None else ("PASS" if ratio >= minimum else "FAIL")
        out.append({"shape": shape, "ratio": f"store/{ref}", "value": ratio, "minimum": minimum, "status": status})
    if memory is not None:
        ok = memory["ratio"] <= MEMORY_LIMIT
        out.append({"shape": "memory", "ratio": "peak/input", "value": memory["ratio"], "maximum": MEMORY_LIMIT,
                    "status": "PASS" if ok else "FAIL"})
    return out


def round_ratios(samples: dict[str, dict[str, list[float]]], shape: str, ref: str) -> list[float]:
    """store/reference throughput of each round (a round's figures were measured back to back)."""
    key = "plain_read" if ref == "plain_read" else shape
    store = samples.get("store", {}).get(shape, [])
    other = samples.get("store" if ref == "plain_read" else ref, {}).get(key, [])
    return [b / a for a, b in zip(store, other) if a > 0]


def check_files(w: Workload, d: Path, results: dict[str, dict[str, float]]) -> tuple[list[str], bool]:
    """Same rows, counters, FTS entries, WAL and schema in every file of one round."""
    checks = []
    expect = {"a": w.rows_a, "b": w.single, "c": w.batch}
    schemas: dict[str, Any] = {}
    for who in (*LIMITS, "naive", "store"):
        for key, n in expect.items():
            path = d / f"{who}-{key}.db"
            if not path.exists() or key not in results.get(who, {}):
                continue
            info = inspect_file(path)
            ok = (info["messages"] == n and info["message_count_sum"] == n
                  and info["messages_fts"] == n and info["messages_fts_trigram"] == n)
            if not ok:
                checks.append(f"{who}-{key}.db: rows {info['messages']}, counters {info['message_count_sum']}, "
                              f"fts {info['messages_fts']}/{info['messages_fts_trigram']}, expected {n}")
            if info["journal_mode"] != "wal":
                checks.append(f"{who}-{key}.db: journal_mode={info['journal_mode']} (not WAL)")
            schemas.setdefault("store" if who == "store" else "baseline", info["schema"])
    if "store" not in schemas or "baseline" not in schemas:
        return checks, False
    store_objs = {(t, n): sql for t, n, sql in schemas["store"]}
    base_objs = {(t, n): sql for t, n, sql in schemas["baseline"]}
    store_only = sorted(n for _, n in store_objs.keys() - base_objs.keys())
    base_only = sorted(n for _, n in base_objs.keys() - store_objs.keys())
    changed = sorted(k[1] for k in store_objs.keys() & base_objs.keys() if store_objs[k] != base_objs[k])
    if store_only or base_only or changed:
        checks.append(f"schema differs: only in store {store_only}; only in baseline {base_only}; "
                      f"different SQL {changed}")
    return checks, True


def fsync_latency_ms(d: Path, n: int = 100) -> float:
    """Median latency of a 4 KiB write + fsync in the bench directory (what each COMMIT pays at least)."""
    path = d / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            samples.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    samples.sort()
    return samples[len(samples) // 2] * 1000


# --------------------------------------------------------------------------- main

async def amain(args: argparse.Namespace) -> int:
    root = Path(tempfile.mkdtemp(prefix="hermes-bench-", dir=args.dir))
    # An empty profile directory: a user's config.yaml must not change pragmas under test.
    home = root / "home"
    home.mkdir()
    os.environ["HERMES_HOME"] = str(home)

    from hermes_state.sqlite.driver import driver_module, driver_name

    w = Workload(args.scale)
    errors: dict[str, str] = {}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in (*LIMITS, "naive", "store")}
    checks: list[str] = []
    schema_compared = False
    memory: dict[str, float] | None = None
    paired: list[tuple[float, float, float]] = []  # (store, limit, limit + hop) seconds of (b), per round
    started = time.perf_counter()
    print(
        f"hermes-state append benchmark: scale={args.scale} repeat={args.repeat} "
        f"python={platform.python_version()} driver={driver_name()} sqlite={driver_module().sqlite_version} "
        f"cpus={os.cpu_count()}"
    )
    fsync_ms = fsync_latency_ms(root)
    fsync_rounds: list[float] = []
    print(f"dir={root}  fsync(4 KiB) median {fsync_ms:.3f} ms")
    print("durability: WAL, synchronous=FULL, every await returns after its COMMIT")
    sys.stdout.flush()
    SessionDB, why = load_store()
    if SessionDB is None:
        errors["store"] = f"hermes_state.SessionDB is not available yet ({why}); store figures skipped, targets N/A"
    try:
        for rep in range(args.repeat):
            rdir = root / f"round{rep + 1}"
            rdir.mkdir()
            fsync_rounds.append(fsync_latency_ms(rdir, 50))
            # Shape by shape, each limit right before the store's run of it, so a
            # store figure and its references see the same machine load.
            results: dict[str, dict[str, float]] = {}
            for key in args.shapes:
                parts = dict(await run_limits(w, rdir, key))
                if args.naive:
                    parts["naive"] = await run_naive(w, rdir, errors, key)
                if SessionDB is not None:
                    parts["store"] = await run_store(SessionDB, w, rdir, errors, key)
                for who, res in parts.items():
                    results.setdefault(who, {}).update(res)
            if SessionDB is not None and args.paired and "b" in args.shapes:
                try:
                    paired.append(await paired_b(SessionDB, w, rdir))
                except Exception:
                    errors["store:b_paired"] = traceback.format_exc()
            for who, res in results.items():
                for shape, secs in res.items():
                    samples.setdefault(who, {}).setdefault(shape, []).append(secs)
            found, compared = check_files(w, rdir, results)
            checks += [f"round {rep + 1}: {c}" for c in found if f"round {rep + 1}: {c}" not in checks]
            schema_compared = schema_compared or compared
            if not args.keep:
                shutil.rmtree(rdir, ignore_errors=True)
            if args.repeat > 1:
                print(f"  round {rep + 1}/{args.repeat} done ({time.perf_counter() - started:.1f}s, "
                      f"fsync {fsync_rounds[-1]:.3f} ms before it)")
                sys.stdout.flush()
        if SessionDB is not None and args.memory_rows > 0:
            try:
                memory = await measure_memory(SessionDB, args.memory_rows, root)
            except Exception:
                errors["store:memory"] = traceback.format_exc()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results = {who: {shape: statistics.median(v) for shape, v in res.items()} for who, res in samples.items()}

    figures, lines = build_report(w, results)
    print()
    print("\n".join(lines))
    if memory is not None:
        print(f"\nmemory: append_messages_batch of {memory['rows']:,} messages: tracemalloc peak "
              f"{memory['peak_bytes'] / 2**20:.1f} MiB, input list {memory['input_bytes'] / 2**20:.1f} MiB "
              f"(peak/input {memory['ratio']:.2f}x)")
    targets = evaluate_targets(figures, memory)
    print()
    print("targets:")
    for t in targets:
        v = "n/a" if t["value"] is None else f"{t['value']:.2f}x"
        bound = f">= {t['minimum']:<5}" if "minimum" in t else f"<= {t['maximum']:<5}"
        rounds = round_ratios(samples, t["shape"], t["ratio"].split("/")[-1])
        per_round = f"  (per round: {', '.join(f'{r:.2f}' for r in rounds)})" if rounds else ""
        print(f"  ({t['shape']}) {t['ratio']:<18} {bound}  got {v:>8}  {t['status']}{per_round}")
    if paired:
        ratios = [limit_s / store_s for store_s, limit_s, _ in paired]
        value = statistics.median(ratios)
        print(f"  (b) paired: store/row_commit, alternating segments of the same run  got {value:>7.2f}x  "
              f"{'PASS' if value >= 0.75 else 'FAIL'} vs 0.75 (per round: {', '.join(f'{r:.2f}' for r in ratios)})")
        floors = [limit_s / hop_s for _, limit_s, hop_s in paired]
        at_floor = [hop_s / store_s for store_s, _, hop_s in paired]
        print(f"      same segments, row_commit with one thread round trip per row (the floor of a writer thread):"
              f" {statistics.median(floors):.2f}x row_commit; store/that floor {statistics.median(at_floor):.2f}x"
              f" (per round: {', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(floors, at_floor))})")
    print()
    compared = "store and baseline schema identical" if schema_compared else "store schema not compared"
    print("file checks: " + (f"all rows, counters and FTS entries present; all files WAL; {compared}"
                             if not checks else "PROBLEMS"))
    for c in checks:
        print("  " + c)
    elapsed = time.perf_counter() - started
    print(f"total wall time {elapsed:.1f}s; figures are medians of {args.repeat} round(s)"
          + (f"; files kept in {root}" if args.keep else ""))
    by_text: dict[str, list[str]] = {}
    for key, text in errors.items():
        by_text.setdefault(text, []).append(key)
    for text, keys in by_text.items():
        print(f"\nERROR in {', '.join(keys)}:\n{text}", file=sys.stderr)

    if args.json:
        out = {
            "scale": args.scale,
            "python": platform.python_version(),
            "driver": driver_name(),
            "sqlite_version": driver_module().sqlite_version,
            "cpus": os.cpu_count(),
            "fsync_ms": fsync_ms,
            "fsync_ms_per_round": fsync_rounds,
            "counts": {"tasks": w.tasks, "per_task": w.per_task, "single": w.single, "batch": w.batch},
            "repeat": args.repeat,
            "figures": figures,
            "memory": memory,
            "samples_seconds": samples,
            "targets": targets,
            "paired_b_seconds": paired,
            "checks": checks,
            "errors": errors,
            "wall_seconds": elapsed,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")

    if errors or checks:
        return 2
    if args.check and any(t["status"] != "PASS" for t in targets):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    backend = argparse.ArgumentParser(add_help=False)
    backend.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    known, rest = backend.parse_known_args(argv)
    if known.backend == "postgres":  # same shapes against a PostgreSQL server: bench/append_postgres.py
        from bench.append_postgres import main as postgres_main

        return postgres_main(rest)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite",
                   help="postgres runs bench/append_postgres.py (see its --help)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply message counts (e.g. 0.1 for a smoke run)")
    p.add_argument("--dir", default=None, help="parent directory for the run's fresh temp directory")
    p.add_argument("--json", default=None, metavar="OUT", help="write all figures to this JSON file")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    p.add_argument("--repeat", type=int, default=3,
                   help="rounds of every measurement on fresh files; the median is reported (default 3)")
    p.add_argument("--naive", action="store_true", help="also run the naive lock-per-write contender (slow)")
    p.add_argument("--memory-rows", type=int, default=None, metavar="N",
                   help="rows of the memory measurement (default 100,000 x scale; 0 skips it)")
    p.add_argument("--keep", action="store_true", help="keep the database files")
    p.add_argument("--shapes", default="abc",
                   help="write shapes to run, a subset of 'abc' (d reads what c wrote); default all")
    p.add_argument("--no-paired", dest="paired", action="store_false",
                   help="skip the paired (b) line (limit and store in alternating segments)")
    args = p.parse_args(argv)
    if args.scale <= 0:
        p.error("--scale must be > 0")
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if not args.shapes or set(args.shapes) - set("abc"):
        p.error("--shapes takes letters of 'abc', e.g. --shapes b")
    args.shapes = "".join(k for k in "abc" if k in args.shapes)
    if args.memory_rows is None:
        args.memory_rows = max(1, round(100_000 * args.scale))
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
