"""Hostile queries against search_messages: generated with hypothesis, checked against invariants.

Invariants: no exception; at most ``limit`` distinct rows, each one real and
obeying every filter; hits from an index route carry highlight markers; hits
from a LIKE route really contain a query token; single-word FTS queries return
exactly the rows a reference tokenizer says contain the word; and no search
changes a byte of the database.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_state import SessionDB
from hermes_state.sqlite.driver import driver_module
from tests.conftest import all_tests
from tests.test_search_cjk import cjk_lib  # noqa: F401  (session fixture: builds the tokenizer)

RESULT_KEYS = ["id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model", "session_started", "context"]
SOURCES = ["cli", "telegram", "discord"]
ROLES = ["user", "assistant", "tool", "system"]
WORDS = [
    "docker", "compose", "deploy", "deployment", "volume", "kubernetes", "rollout", "error", "retry", "token",
    "sqlite", "index", "query", "table", "commit", "branch", "merge", "latency", "cache", "worker",
]
EXTRAS = [
    "你好世界", "数据库错误", "世界", "한국어 텍스트", "カタカナ", "😀", "🚀 launch", "snake_case", "100% done",
    "back\\slash", "role:user", "'quoted'", "a_b%c", "NEAR", "and", "or", "not", "p2.2", "chat-send", "ünïcode",
]
FRAGMENTS = [
    "AND", "OR", "NOT", "NEAR(", "NEAR", "(", ")", '"', "*", "^", "+", "-", ":", "role:", "content:", "tool_name:",
    "'; DROP TABLE messages; --", "%", "_", "\\", "\x00", "{", "}", "[", "]", ",", ".", "'", "\ud800", "\udfff",
    "你好", "世界", "数据库", "世", "한국어", "カタカナ", "😀", "🚀", "İ", "ß", "é", "\u3000", "。",
    *WORDS, *[w[:3] for w in WORDS], *[w[1:5] for w in WORDS],
]


class Fixture:
    """A store seeded once, driven from its own event loop (hypothesis examples are synchronous)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.loop = asyncio.new_event_loop()
        self.db = SessionDB(path)
        self.routes: list[str] = []
        self.rows: dict[int, dict[str, Any]] = {}

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def seed(self) -> None:
        import random

        rng = random.Random(7)
        for n in range(9):
            await self.db.create_session(f"s{n}", SOURCES[n % 3], model=f"m{n % 2}")
        for i in range(400):
            words = rng.choices(WORDS, k=rng.randint(2, 9))
            if rng.random() < 0.4:
                words.insert(rng.randrange(len(words) + 1), rng.choice(EXTRAS))
            role = ROLES[i % 4]
            sid = f"s{i % 9}"
            text = " ".join(words)
            if role == "tool":
                await self.db.append_message(sid, "tool", text, tool_name=rng.choice(["terminal", "web_search"]))
            elif role == "assistant" and i % 7 == 0:
                calls = [{"id": f"c{i}", "type": "function", "function": {"name": "terminal", "arguments": text}}]
                await self.db.append_message(sid, "assistant", "", tool_calls=calls)
            else:
                await self.db.append_message(sid, role, text)
        # Some rewound (hidden) rows and some compacted (searchable) history.
        target = await self.db.append_message("s1", "user", "rewound docker question")
        await self.db.append_message("s1", "assistant", "rewound deployment answer")
        await self.db.rewind_to_message("s1", target)
        await self.db.archive_and_compact("s2", [{"role": "user", "content": "compacted summary of docker work"}])

    def load_rows(self) -> None:
        # The store's own SQLite build: an older library sharing the WAL
        # file concurrently would be exposed to the WAL-reset bug.
        with closing(driver_module().connect(str(self.path))) as conn:
            cur = conn.execute(
                "SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls, m.active, m.compacted, "
                "s.source FROM messages m JOIN sessions s ON s.id = m.session_id"
            )
            names = [d[0] for d in cur.description]
            for values in cur.fetchall():
                row = dict(zip(names, values))
                self.rows[row["id"]] = row

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        with closing(driver_module().connect(str(self.path))) as conn:
            for table in ("messages", "sessions", "state_meta", "schema_version", "sqlite_master"):
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1"):
                    digest.update(repr(row).encode())
        return digest.hexdigest()


class _RouteLog(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("slow session search: path="):
            self.sink.append(message.split("path=", 1)[1].split()[0])


@pytest.fixture(scope="module", params=["cjk-absent", "cjk-loaded"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixture]:
    home = tmp_path_factory.mktemp("fuzz-home")
    saved = {k: os.environ.get(k) for k in ("HERMES_HOME", "HERMES_SEARCH_SLOW_MS", "HERMES_FTS5_CJK_SO")}
    os.environ["HERMES_HOME"] = str(home)
    os.environ["HERMES_SEARCH_SLOW_MS"] = "0"  # every search logs its route
    os.environ.pop("HERMES_FTS5_CJK_SO", None)
    if request.param == "cjk-loaded":
        os.environ["HERMES_FTS5_CJK_SO"] = str(request.getfixturevalue("cjk_lib"))
    fixture = Fixture(tmp_path_factory.mktemp("fuzz") / "state.db")
    logger = logging.getLogger("hermes_state.search")
    handler = _RouteLog(fixture.routes)
    previous_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        fixture.run(fixture.seed())
        with closing(driver_module().connect(str(fixture.path))) as conn:
            cjk = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_cjk'").fetchone() is not None
        assert cjk == (request.param == "cjk-loaded")
        fixture.load_rows()
        before = fixture.fingerprint()
        yield fixture
        fixture.run(fixture.db.close())
        assert fixture.fingerprint() == before, "a search changed the database"
        with closing(driver_module().connect(str(fixture.path))) as conn:
            tables = ["messages_fts", "messages_fts_trigram"]
            if request.param == "cjk-loaded":
                conn.enable_load_extension(True)
                conn.load_extension(os.environ["HERMES_FTS5_CJK_SO"])
                tables.append("messages_fts_cjk")
            for table in tables:
                conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
        fixture.loop.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


hostile_text = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(["\ud800", "\udc00", "\x00", '"', "*", "(", ")"])),
    max_size=40,
)
queries = st.one_of(
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), hostile_text), max_size=10).flatmap(
        lambda parts: st.sampled_from(["", " "]).map(lambda sep: sep.join(parts))
    ),
    st.sampled_from(FRAGMENTS),
    st.builds(lambda w, n: (w + " ") * n, st.sampled_from(WORDS + FRAGMENTS), st.integers(100, 20000)),
)
name_lists = lambda pool: st.one_of(st.none(), st.lists(st.sampled_from(pool), max_size=3))


def _tokens(sanitized_raw: str) -> list[str]:
    return [t for t in sanitized_raw.split() if t.upper() not in ("AND", "OR", "NOT")] or [sanitized_raw]


def _check_hits(world: Fixture, query: str, hits: list[dict[str, Any]], opts: dict[str, Any], route: str) -> None:
    from hermes_state.search_text.sanitize import sanitize_fts5_query

    assert len(hits) <= opts["limit"]
    assert len({h["id"] for h in hits}) == len(hits)
    for hit in hits:
        assert list(hit) == RESULT_KEYS
        row = world.rows[hit["id"]]
        assert (hit["session_id"], hit["role"], hit["source"]) == (row["session_id"], row["role"], row["source"])
        if opts["source_filter"] is not None:
            assert row["source"] in opts["source_filter"]
        if opts["exclude_sources"]:
            assert row["source"] not in opts["exclude_sources"]
        if opts["role_filter"]:
            assert row["role"] in opts["role_filter"]
        if not opts["include_inactive"]:
            assert row["active"] == 1 or row["compacted"] == 1
        assert isinstance(hit["context"], list) and 1 <= len(hit["context"]) <= 3
        if route in ("fts5", "trigram", "fts_cjk"):
            assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"], (query, hit)
        elif route == "like_scan":
            raw = sanitize_fts5_query(query).strip('"').strip()
            haystack = " ".join(str(row[c] or "") for c in ("content", "tool_name", "tool_calls")).lower()
            assert any(tok.lower() in haystack for tok in _tokens(raw)), (query, hit)


@settings(max_examples=250 if all_tests() else 60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    query=queries,
    source_filter=name_lists(SOURCES + ["ghost"]),
    exclude_sources=name_lists(SOURCES),
    role_filter=name_lists(ROLES),
    include_inactive=st.booleans(),
    sort=st.sampled_from([None, "newest", "oldest", "rank", " NEWEST ", ""]),
    limit=st.integers(0, 30),
    offset=st.integers(0, 5),
)
def test_hostile_queries_never_raise_and_obey_filters(world: Fixture, query: str, **opts: Any) -> None:
    before = len(world.routes)
    hits = world.run(world.db.search_messages(query, **opts))
    route = world.routes[-1] if len(world.routes) > before else "none"
    if opts["source_filter"] == [] or opts["limit"] == 0:
        assert hits == []
    _check_hits(world, query, hits, opts, route)


def _words_of(row: dict[str, Any]) -> set[str]:
    text = " ".join(str(row[c] or "") for c in ("content", "tool_name", "tool_calls")).lower()
    return set(re.findall(r"[^\W_]+", text))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    word=st.sampled_from(WORDS),
    role_filter=name_lists(ROLES),
    source_filter=name_lists(SOURCES),
    include_inactive=st.booleans(),
)
def test_single_word_queries_return_exactly_the_matching_rows(world: Fixture, word: str, **opts: Any) -> None:
    hits = world.run(world.db.search_messages(word, limit=10_000, **opts))
    expected = {
        mid
        for mid, row in world.rows.items()
        if word in _words_of(row)
        and (opts["include_inactive"] or row["active"] == 1 or row["compacted"] == 1)
        and (not opts["role_filter"] or row["role"] in opts["role_filter"])
        and (opts["source_filter"] is None or row["source"] in opts["source_filter"])
    }
    assert {h["id"] for h in hits} == expected


@pytest.mark.parametrize(
    "query",
    ["a_" * 3000 + "!", '"' * 5001, "NEAR(" * 2000, "x" * 100_000, "(" * 4000 + "docker", "世" * 5000, "d" + "*" * 9000],
)
def test_pathological_queries_complete(world: Fixture, query: str) -> None:
    # Inputs that would make a backtracking sanitizer or an unbounded LIKE
    # pattern crawl; they must simply come back (the route's own invariants hold).
    before = len(world.routes)
    hits = world.run(world.db.search_messages(query))
    opts = {"limit": 20, "source_filter": None, "exclude_sources": None, "role_filter": None, "include_inactive": False}
    _check_hits(world, query, hits, opts, world.routes[-1] if len(world.routes) > before else "none")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    query=st.one_of(
        st.sampled_from(WORDS),
        st.builds(lambda a, b: f'"{a} {b}"', st.sampled_from(WORDS), st.sampled_from(WORDS)),
        st.sampled_from([w[:3] + "*" for w in WORDS]),
        st.builds(lambda a, b: f"{a} OR {b}", st.sampled_from(WORDS), st.sampled_from(WORDS)),
    ),
    include_inactive=st.booleans(),
    limit=st.integers(1, 40),
    offset=st.integers(0, 60),
)
def test_relevance_order_is_fts5_rank_order(world: Fixture, query: str, include_inactive: bool, limit: int, offset: int) -> None:
    hits = world.run(world.db.search_messages(query, limit=limit, offset=offset, include_inactive=include_inactive))
    visible = "" if include_inactive else " AND (m.active = 1 OR m.compacted = 1)"
    with closing(driver_module().connect(str(world.path))) as conn:
        expected = [
            r[0]
            for r in conn.execute(
                "SELECT m.id FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
                f"WHERE messages_fts MATCH ?{visible} ORDER BY rank LIMIT ? OFFSET ?",
                (query, limit, offset),
            )
        ]
    if expected:
        assert [h["id"] for h in hits] == expected
