"""search_messages finds what people paste (issue 30): URLs, paths, key=value, C#, c++, #1234,
e-mail addresses, emoji, typed as stored, on both backends; plain words and phrases keep the
word route; hostile text gives a list, never an error."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from hermes_agent import session_search
from hermes_state import SessionDB
from hermes_state.search_text.sanitize import literal_groups, literal_prefilter, needs_literal

from .test_agent_support import needs

# (key, role, content): each pasted string stored once, beside near misses word search would confuse with it.
STORED = [
    ("status", "user", "the upstream answered status=502 after the deploy"),
    ("status-near", "user", "status 502 was logged elsewhere"),
    ("pytest", "user", "please run pytest tests/test_api.py -k login"),
    ("url", "assistant", "see https://docs.docker.com/compose/ for the reference"),
    ("srv", "tool", "ls: cannot access '/srv/app/current': No such file or directory"),
    ("srv-near", "user", "the app runs on srv two"),
    ("csharp", "user", "I would write it in C# instead"),
    ("cpp", "assistant", "compile it with c++ -O2"),
    ("c-near", "user", "option c is the answer"),
    ("issue", "user", "fixed in #1234 yesterday"),
    ("issue-near", "user", "we shipped 1234 units"),
    ("mail", "user", "write to alice.smith@example.com about the invoice"),
    ("fire", "assistant", "this build is on fire 🔥 again"),
    ("kv", "user", "set key=value in config.ini"),
    ("percent", "user", "cpu at 100% now"),
    ("percent-near", "user", "cpu at 1000 now"),
    ("plain", "assistant", "The quick brown fox jumps over the lazy dog"),
    ("smile", "user", "thanks :) that helped"),
]

# query -> keys of the rows that must be found (exactly these).
PASTED = {
    "status=502": {"status"},
    "tests/test_api.py": {"pytest"},
    "https://docs.docker.com": {"url"},
    "/srv/app": {"srv"},
    "C#": {"csharp"},
    "c++": {"cpp"},
    "c#": {"csharp"},
    "#1234": {"issue"},
    "alice.smith@example.com": {"mail"},
    "🔥": {"fire"},
    "key=value": {"kv"},
    "100%": {"percent"},
    ":)": {"smile"},
    '"on fire 🔥"': {"fire"},
    "C# OR #1234": {"csharp", "issue"},
    "cpu NOT 100%": {"percent-near"},
    # Pieces of a pasted string, cut anywhere (the word index may narrow the match, never lose a row).
    "tatus=50": {"status"},
    "ocker.com/comp": {"url"},
    "app/cur": {"srv"},
    "h@example.c": {"mail"},
}

HOSTILE = [
    "NEAR(a b", "a:b:c", "col:value", "^start", "{x}", "(((", ")))", "\"", '"""', "* * *", "'", "\\", "%", "_",
    "%_%", "x\x00y", "\x00", "\ud800", "\u202e", "\u200b", "a\u0301", "NOT 🔥", "OR", "🔥" * 3000,
    "C#" * 1500, " ".join(["C#"] * 1200), "a" * 5000, "\n\t\r", "e\u0301\u0300\u0302" * 100, "ﷺ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]


async def seed(db: Any) -> dict[str, int]:
    await db.create_session("paste", "cli", model="m")
    ids = {}
    for key, role, content in STORED:
        ids[key] = await db.append_message("paste", role, content, tool_name="terminal" if role == "tool" else None)
    return ids


def test_needs_literal_only_for_what_word_search_splits() -> None:
    for text in PASTED:
        assert needs_literal(text), text
    for text in ("docker", "quick brown", '"quick brown"', "dock*", "snake_case", "P2.2", "chat-send", "café OR tea"):
        assert not needs_literal(text), text
    assert [g.positive for g in literal_groups('"C# tips" OR c++ NOT java')] == [("C# tips",), ("c++",)]
    assert literal_groups("c++ NOT java")[0].negative == ("java",)
    assert literal_groups("dock* ***")[0].positive == ("dock", "***")
    # The word query that narrows a literal match: whole words inside the term, the last one a prefix.
    assert literal_prefilter(literal_groups("/srv/app")) == '("srv" AND "app"*)'
    assert literal_prefilter(literal_groups("status=502")) == '("502"*)'
    assert literal_prefilter(literal_groups("#1234 OR key=value")) == '("1234"*) OR ("value"*)'
    for unbounded in ("C#", "🔥", "c++", "C# OR #1234", "=fé", "cpu NOT 100%"):
        assert literal_prefilter(literal_groups(unbounded)) is None, unbounded


@pytest.mark.parametrize("query", list(PASTED))
async def test_pasted_text_is_found_as_typed(store: Any, query: str) -> None:
    ids = await seed(store)
    hits = await store.search_messages(query, limit=50)
    assert {h["id"] for h in hits} == {ids[k] for k in PASTED[query]}, query
    for hit in hits:
        assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"], hit["snippet"]
        assert hit["context"] and hit["context"][min(1, len(hit["context"]) - 1)]


async def test_snippets_mark_the_typed_text(store: Any) -> None:
    await seed(store)
    expected = {
        "status=502": ">>>status=502<<<",
        "https://docs.docker.com": ">>>https://docs.docker.com<<</compose/",
        "/srv/app": ">>>/srv/app<<</current",
        "c#": ">>>C#<<<",
        "🔥": "on fire >>>🔥<<< again",
        "alice.smith@example.com": ">>>alice.smith@example.com<<<",
    }
    for query, marked in expected.items():
        (hit,) = await store.search_messages(query)
        assert marked in hit["snippet"], (query, hit["snippet"])


async def test_queries_word_search_answers_loosely_prefer_the_literal_text(store: Any) -> None:
    # The sanitizer makes "c++" the word "c": the rows that hold "c++" itself answer, page after page.
    ids = await seed(store)
    more = [await store.append_message("paste", "user", f"c++ build {i}") for i in range(3)]
    for i in range(5):
        await store.append_message("paste", "user", f"plan c option {i}")
    cpp = [*more[::-1], ids["cpp"]]
    pages = [[h["id"] for h in await store.search_messages("c++", limit=2, offset=off)] for off in (0, 2, 4)]
    assert pages == [cpp[:2], cpp[2:], []]
    assert await store.count_search_matches("C++") == 4
    assert [h["id"] for h in await store.search_messages("C++ NOT build")] == [ids["cpp"]]
    # No row holds the literal text: word search's hits stand, as before.
    assert {h["id"] for h in await store.search_messages("option: c")} >= {ids["c-near"]}
    assert await store.search_messages("option: c", offset=50) == []


async def test_plain_words_and_phrases_keep_the_word_route(store: Any, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    ids = await seed(store)
    monkeypatch.setenv("HERMES_SEARCH_SLOW_MS", "0")
    caplog.set_level(logging.INFO, logger="hermes_state.search")
    assert [h["snippet"] for h in await store.search_messages("fox")] == [
        "The quick brown >>>fox<<< jumps over the lazy dog"]
    assert [h["id"] for h in await store.search_messages('"quick brown"')] == [ids["plain"]]
    assert [h["id"] for h in await store.search_messages("lazy dog")] == [ids["plain"]]
    assert {h["id"] for h in await store.search_messages("502")} == {ids["status"], ids["status-near"]}
    assert {h["id"] for h in await store.search_messages("test_api.py")} == {ids["pytest"]}
    assert [h["id"] for h in await store.search_messages("status=502")] == [ids["status"]]
    assert await store.search_messages("zeppelin") == []
    paths = [r.getMessage().split("path=", 1)[1].split()[0] for r in caplog.records if "path=" in r.getMessage()]
    # (PostgreSQL's parser keeps "tests/test_api.py" as one path token: its substring route answers.)
    assert [p == "literal" for p in paths] == [False] * 5 + [True, False], paths


async def test_literal_route_filters_sorts_and_pages(store: Any) -> None:
    await store.create_session("a", "cli")
    await store.create_session("b", "telegram")
    ids = []
    for i in range(7):
        ids.append(await store.append_message("a" if i % 2 == 0 else "b", "user" if i < 5 else "assistant",
                                              f"step {i}: GET https://api.example.org/v1?page={i}"))
    url = "https://api.example.org/v1"
    newest = [h["id"] for h in await store.search_messages(url, limit=50)]
    assert newest == ids[::-1]
    assert [h["id"] for h in await store.search_messages(url, sort="oldest", limit=3, offset=2)] == ids[2:5]
    pages = [h["id"] for off in range(0, 7, 2) for h in await store.search_messages(url, limit=2, offset=off)]
    assert pages == newest
    assert {h["id"] for h in await store.search_messages(url, source_filter=["telegram"])} == set(ids[1::2])
    assert {h["id"] for h in await store.search_messages(url, exclude_sources=["telegram"])} == set(ids[0::2])
    assert {h["id"] for h in await store.search_messages(url, role_filter=["assistant"])} == set(ids[5:])
    assert await store.search_messages(url, source_filter=[]) == []
    assert await store.search_messages(url, limit=0) == []
    projected = await store.search_messages("?page=3", fields=["id", "snippet"])
    assert projected == [{"id": ids[3], "snippet": "step 3: GET https://api.example.org/v1>>>?page=3<<<"}]


async def test_tool_rows_and_tool_calls_are_searched(store: Any) -> None:
    ids = await seed(store)
    call = await store.append_message("paste", "assistant", "", tool_calls=[
        {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": '{"cmd": "curl -sS localhost:8080/healthz"}'}}])
    assert [h["id"] for h in await store.search_messages("/srv/app", role_filter=["tool"])] == [ids["srv"]]
    (hit,) = await store.search_messages("localhost:8080/healthz")
    assert hit["id"] == call and ">>>localhost:8080/healthz<<<" in hit["snippet"]


async def test_wildcards_and_case_are_literal(store: Any) -> None:
    ids = await seed(store)
    assert [h["id"] for h in await store.search_messages("100%")] == [ids["percent"]]
    assert await store.search_messages("1_00%") == []
    assert [h["id"] for h in await store.search_messages("KEY=VALUE")] == [ids["kv"]]


async def test_hostile_text_gives_a_list(store: Any) -> None:
    await seed(store)
    bidi = await store.append_message("paste", "user", "a\u202eexe.jpg and \u200bzero width")
    for text in HOSTILE:
        hits = await store.search_messages(text)
        assert isinstance(hits, list), repr(text[:20])
        for hit in hits:
            assert isinstance(hit["snippet"], (str, type(None)))
    # Word search answers this one on SQLite (the override is a separator there), the literal route on PostgreSQL.
    (hit,) = await store.search_messages("\u202eexe")
    assert hit["id"] == bidi and "exe<<<.jpg" in hit["snippet"]


@needs("search_messages", "search")
async def test_agent_session_search_finds_a_pasted_url(store: SessionDB) -> None:
    await store.create_session("docs", "cli", model="m")
    await store.append_message("docs", "user", "where are the compose docs?")
    found = await store.append_message("docs", "assistant", "Read https://docs.docker.com/compose/ first.")
    await store.create_session("other", "cli", model="m")
    await store.append_message("other", "user", "docker compose up failed on docs")
    out = json.loads(await session_search(query="https://docs.docker.com", db=store))
    assert out["success"] and out["mode"] == "discover" and out["count"] == 1
    (hit,) = out["results"]
    assert hit["session_id"] == "docs" and hit["match_message_id"] == found
    assert ">>>https://docs.docker.com<<<" in hit["snippet"]


# ----------------------------------------------------------------- hit counts


async def test_count_search_matches_follows_every_route(store: Any) -> None:
    ids = await seed(store)
    await store.create_session("other", "telegram")
    for i in range(30):
        await store.append_message("other", "user", f"status=502 again, retry {i} with docker")
    await store.append_message("other", "user", "你好世界 deployment")
    for query, kwargs in [
        ("status=502", {}), ("status=502", {"source_filter": ["cli"]}), ("status=502", {"exclude_sources": ["cli"]}),
        ("docker", {}), ("retry", {"role_filter": ["assistant"]}), ("ocker", {}), ("你好世界", {}), ("世界", {}),
        ("🔥", {}), ("C# OR #1234", {}), ("zeppelin", {}), ("compose -docker", {}), ("fox", {"source_filter": []}),
    ]:
        everything = await store.search_messages(query, limit=1000, fields=["id"], **kwargs)
        assert await store.count_search_matches(query, **kwargs) == len(everything), (query, kwargs)
    assert await store.count_search_matches("status=502") == 31
    assert await store.count_search_matches("status=502", cap=10) == 10
    assert await store.count_search_matches("status=502", cap=0) == 0
    assert await store.count_search_matches("   ") == 0
    assert await store.count_search_matches("/srv/app", role_filter=["tool"]) == 1 == len([ids["srv"]])


async def test_count_search_matches_rejects_bad_arguments(store: Any) -> None:
    with pytest.raises(TypeError, match="query"):
        await store.count_search_matches(42)
    with pytest.raises(TypeError, match="source_filter"):
        await store.count_search_matches("x", source_filter="cli")
    with pytest.raises(ValueError, match="cap"):
        await store.count_search_matches("x", cap=-1)
    with pytest.raises(TypeError, match="cap"):
        await store.count_search_matches("x", cap="10")


async def test_structured_content_is_searched_literally(store: Any) -> None:
    # SQLite stores it as "\x00json:..." text, which LIKE cannot read past its first character.
    await store.create_session("mm", "cli")
    found = await store.append_message("mm", "user", [
        {"type": "text", "text": "screenshot of https://docs.docker.com/compose/ attached"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])
    await store.append_message("mm", "user", "plain text without the link")
    (hit,) = await store.search_messages("https://docs.docker.com")
    assert hit["id"] == found and hit["snippet"] == "screenshot of >>>https://docs.docker.com<<</compose/ attached"
    assert [h["id"] for h in await store.search_messages("HTTPS://DOCS.docker.com")] == [found]
    assert await store.search_messages("link NOT https://docs.docker.com") != []
    assert await store.count_search_matches("https://docs.docker.com") == 1
