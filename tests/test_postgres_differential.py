"""Differential state machine: one random call sequence against a SQLite and a PostgreSQL store.

Every step runs the same call on both stores and asserts the same outcome
(the same value, or the same exception class and message); after every step
the reads of every session in play must be identical. Values that cannot
match by construction are normalised first, and only those:

* message ids (an intended difference, listed in docs/postgres.md): SQLite reuses
  the highest id after the newest rows are deleted and PostgreSQL's identity
  sequence never does (and skips ids a rolled-back attempt drew), so ids are
  compared through their order (reads return rows by id) and an
  ``append_message`` result only as "an int";
* wall-clock times the store takes itself (``started_at``, ``ended_at``, ...):
  the two calls run at different moments, so only "set or not" is compared.

Each rule belongs to a command group; ``ENABLED_GROUPS`` lists the groups
whose PostgreSQL handlers and queries are on this branch. A rule of another
group is written but off (its precondition is false) until its group lands.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from hermes_state import SessionDB
from hermes_state.methods.search import SEARCH_RESULT_FIELDS
from hermes_state.postgres import SessionDB as PostgresSessionDB

from .postgres_support import admin_connect, server_dsn, store_dsn

pytestmark = pytest.mark.backends("postgres")

# Command groups whose rules run.
ENABLED_GROUPS = frozenset({"core", "usage", "compression", "titles", "search"})

SESSION_IDS = ("s1", "s2", "s3")
WORDS = ("alpha", "beta", "gamma", "delta", "kappa", "lambda", "omega", "sigma")
# Keys whose values the store takes from the clock itself.
CLOCK_KEYS = frozenset({"started_at", "ended_at", "last_activity_at", "first_seen", "last_seen", "session_started",
                        "last_read_at"})

MACHINE_SETTINGS = settings(
    # Each example builds a PostgreSQL schema and a SQLite file; fewer, longer examples cover as many steps.
    max_examples=6,
    stateful_step_count=20,
    deadline=None,
    # No shrinking: a 20-step failure reads well as it is, and shrinking one costs minutes of CI.
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# --------------------------------------------------------------------------- values

sessions = st.sampled_from(SESSION_IDS)
phrases = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
texts = st.one_of(phrases, st.text(max_size=20))
contents = st.one_of(
    st.none(),
    texts,
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": phrases}), min_size=1, max_size=2),
    st.dictionaries(st.sampled_from(("answer", "note")), st.one_of(phrases, st.integers(-5, 5), st.booleans()),
                    min_size=1, max_size=2),
)
tool_calls = st.one_of(
    st.none(),
    st.lists(
        st.fixed_dictionaries({
            "id": st.sampled_from(("call_1", "call_2")),
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": st.sampled_from(("shell", "read_file")),
                                               "arguments": st.just("{}")}),
        }),
        min_size=1, max_size=2,
    ),
)
roles = st.sampled_from(("user", "assistant", "tool", "system"))
messages = st.builds(
    lambda role, content, calls, name, ts: {
        "role": role, "content": content, "tool_calls": calls, "tool_name": name, "timestamp": ts,
    },
    roles, contents, tool_calls, st.sampled_from((None, "shell")), st.floats(1_000_000, 2_000_000),
)
message_lists = st.lists(messages, max_size=4)
queries = st.one_of(
    st.sampled_from(WORDS),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(" ".join),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda p: f'"{p[0]} {p[1]}"'),
    st.sampled_from(WORDS).map(lambda w: w[:3] + "*"),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda p: f"{p[0]} OR {p[1]}"),
    st.tuples(st.sampled_from(WORDS), st.sampled_from(WORDS)).map(lambda p: f"{p[0]} NOT {p[1]}"),
)


def _trigram_reads_nul_led_text() -> bool:
    """Whether the SQLite the store runs on finds text that begins with NUL through its trigram index.

    SQLite 3.40 (the interpreter's ``sqlite3`` here) does not: its trigram
    tokenizer stops at the NUL that starts structured content's stored form
    (and a str that begins with NUL), while its word index and SQLite 3.53
    read on. Asked of the driver itself, not of a version list.
    """
    from hermes_state.sqlite.driver import driver_module

    conn = driver_module().connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
        conn.execute("INSERT INTO t VALUES (?)", ("\x00json:alpha",))
        return bool(conn.execute("SELECT 1 FROM t WHERE t MATCH 'alpha'").fetchall())
    finally:
        conn.close()


TRIGRAM_READS_NUL_LED_TEXT = _trigram_reads_nul_led_text()


def nul_led(content: Any) -> bool:
    """True for message content SQLite stores as text beginning with NUL (structured, bytes, or such a str)."""
    return content is not None and (not isinstance(content, str) or content.startswith("\x00"))


def normalise(value: Any, key: str | None = None) -> Any:
    """``value`` with message ids and store-clock times reduced to what both backends must agree on."""
    if isinstance(value, dict):
        return {k: normalise(v, k) for k, v in value.items() if not (k == "id" and isinstance(v, int))}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if key in CLOCK_KEYS:
        return value is not None
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def outcome(result: Any) -> tuple[str, Any]:
    """A call's result or exception in a comparable form."""
    if isinstance(result, BaseException):
        return ("raised", f"{type(result).__name__}: {result}")
    return ("returned", normalise(result))


# --------------------------------------------------------------------------- the machine

def make_machine(admin: str, root: Path) -> type[RuleBasedStateMachine]:
    """The state machine class bound to the server ``admin`` and the directory ``root`` for SQLite files."""

    class SameReads(RuleBasedStateMachine):
        counter = 0

        def __init__(self) -> None:
            super().__init__()
            type(self).counter += 1
            self.loop = asyncio.new_event_loop()
            self.schema = f"hs_diff_{uuid.uuid4().hex}"
            self.sqlite = SessionDB(root / f"example-{type(self).counter}" / "state.db")
            self.run(self._admin(f'CREATE SCHEMA "{self.schema}"'))
            self.postgres = PostgresSessionDB(store_dsn(admin, self.schema))

        async def _admin(self, sql: str) -> None:
            conn = await admin_connect(admin)
            try:
                await conn.execute(sql)
            finally:
                await conn.close()

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            try:
                problems = self.run(self.postgres.integrity_problems())
                self.run(self.sqlite.close())
                self.run(self.postgres.close())
            finally:
                try:
                    self.run(self._admin(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
                finally:
                    self.loop.close()
            # Whatever the calls did, doctor finds nothing wrong (no false alarm from counters or links).
            assert problems == []

        def both(self, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            """Call ``method`` on both stores (SQLite first); assert the same outcome; returns the raw results."""

            async def call(db: Any) -> Any:
                try:
                    return await getattr(db, method)(*args, **kwargs)
                except Exception as exc:  # compared below: the same class and message on both
                    return exc

            left = self.run(call(self.sqlite))
            right = self.run(call(self.postgres))
            assert outcome(left) == outcome(right), f"{method}{args}{kwargs}: sqlite {left!r} / postgres {right!r}"
            return left, right

        # ---------------------------------------------------------------- core

        @initialize(sources=st.lists(st.sampled_from(("cli", "api")), min_size=3, max_size=3),
                    prompt=st.sampled_from((None, "be brief")))
        def start(self, sources: list[str], prompt: str | None) -> None:
            # Every session exists at first, so the early steps write rather than miss.
            for sid, source in zip(SESSION_IDS, sources):
                self.both("create_session", sid, source, model="m1", system_prompt=prompt)

        @rule(sid=sessions, source=st.sampled_from(("cli", "api")), model=st.sampled_from((None, "m1", "m2")),
              parent=st.one_of(st.none(), sessions), prompt=st.sampled_from((None, "be brief", "be kind")))
        def create(self, sid: str, source: str, model: str | None, parent: str | None, prompt: str | None) -> None:
            self.both("create_session", sid, source, model=model,
                      parent_session_id=parent if parent != sid else None, system_prompt=prompt)

        @rule(sid=sessions, message=messages)
        def append(self, sid: str, message: dict[str, Any]) -> None:
            left, right = self.both("append_message", sid, **message)
            if not isinstance(left, BaseException):
                assert type(left) is int and type(right) is int

        @rule(sid=sessions, batch=message_lists)
        def batch(self, sid: str, batch: list[dict[str, Any]]) -> None:
            self.both("append_messages_batch", sid, batch)

        @rule(sid=sessions, batch=message_lists, mode=st.sampled_from(("all", "active_only", "archive_dropped")))
        def replace(self, sid: str, batch: list[dict[str, Any]], mode: str) -> None:
            self.both("replace_messages", sid, batch, active_only=mode == "active_only",
                      archive_dropped=mode == "archive_dropped")

        @rule(sid=sessions)
        def pop(self, sid: str) -> None:
            self.both("pop_message", sid)

        @rule(sid=sessions, reason=st.sampled_from(("user_exit", "compression", "timeout")))
        def end(self, sid: str, reason: str) -> None:
            self.both("end_session", sid, reason)

        @rule(sid=sessions)
        def reopen(self, sid: str) -> None:
            self.both("reopen_session", sid)

        @rule(sid=sessions)
        def delete(self, sid: str) -> None:
            self.both("delete_session", sid)

        # ---------------------------------------------------------------- other groups

        @precondition(lambda self: "compression" in ENABLED_GROUPS)
        @rule(sid=sessions, batch=message_lists)
        def compact(self, sid: str, batch: list[dict[str, Any]]) -> None:
            self.both("archive_and_compact", sid, batch)

        @precondition(lambda self: "titles" in ENABLED_GROUPS)
        @rule(sid=sessions, title=st.sampled_from((None, "first", "second", "  padded  ")))
        def title(self, sid: str, title: str | None) -> None:
            self.both("set_session_title", sid, title)

        @precondition(lambda self: "usage" in ENABLED_GROUPS)
        @rule(sid=sessions, tokens=st.integers(0, 1000), model=st.sampled_from((None, "m1", "m2")),
              cost=st.one_of(st.none(), st.floats(0, 5)))
        def usage(self, sid: str, tokens: int, model: str | None, cost: float | None) -> None:
            self.both("update_token_counts", sid, input_tokens=tokens, output_tokens=tokens // 2, model=model,
                      estimated_cost_usd=cost, api_call_count=1)

        @precondition(lambda self: "search" in ENABLED_GROUPS)
        @rule(query=queries, sort=st.sampled_from((None, "newest", "oldest")))
        def search(self, query: str, sort: str | None) -> None:
            # Intended differences (docs/postgres.md): snippet windows, and the order of hits by
            # relevance (bm25 vs ts_rank; substring routes newest first); hits, their
            # fields and context must agree. (At most 1,000 hits: one rank window or two.)
            fields = [f for f in SEARCH_RESULT_FIELDS if f != "snippet"]
            kwargs = {"sort": sort, "include_inactive": True, "limit": 1000, "fields": fields}
            left = self.run(self.sqlite.search_messages(query, **kwargs))
            right = self.run(self.postgres.search_messages(query, **kwargs))
            if sort is None:
                left, right = sorted(left, key=lambda h: h["id"]), sorted(right, key=lambda h: h["id"])
            if outcome(left) != outcome(right) and not TRIGRAM_READS_NUL_LED_TEXT:
                # The one gap this SQLite has (see _trigram_reads_nul_led_text): its substring
                # fallback cannot see NUL-led rows. Allowed only in that exact form: SQLite
                # returned none of them, and without them PostgreSQL returns the same.
                assert not any(nul_led(c) for c in self.contents(self.sqlite, left)), query
                right = [h for h, c in zip(right, self.contents(self.postgres, right)) if not nul_led(c)]
            assert outcome(left) == outcome(right), f"search_messages({query!r}, sort={sort!r})"

        def contents(self, db: Any, hits: list[dict[str, Any]]) -> list[Any]:
            """The stored content of each hit, read back from ``db``."""
            by_id: dict[int, Any] = {}
            for sid in {h["session_id"] for h in hits}:
                for message in self.run(db.get_messages(sid, include_inactive=True)):
                    by_id[message["id"]] = message["content"]
            return [by_id[h["id"]] for h in hits]

        # ---------------------------------------------------------------- reads after every step

        @invariant()
        def same_reads(self) -> None:
            self.both("message_count")
            for sid in SESSION_IDS:
                self.both("get_session", sid)
                self.both("get_messages", sid, include_inactive=True)
                self.both("message_count", sid)
                self.both("get_messages_as_conversation", sid)
                if "titles" in ENABLED_GROUPS:
                    self.both("get_session_title", sid)

    return SameReads


def test_sqlite_and_postgres_give_the_same_reads(tmp_path: Path) -> None:
    admin = server_dsn()
    run_state_machine_as_test(make_machine(admin, tmp_path), settings=MACHINE_SETTINGS)
