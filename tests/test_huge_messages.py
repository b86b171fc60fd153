"""Messages far larger than PostgreSQL's 1 MB ``tsvector`` limit are stored, read back and found on both backends.

A log dump of distinct words, a bigger one, and JSON-like tool output each
round-trip exactly. Words from the first 256 KiB are found on both
backends; SQLite indexes the whole message, PostgreSQL its first 256 KiB
(docs/postgres.md says so), so a word near the end is found on SQLite only.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from .raw_sql import is_postgres

EARLY = "zqxearlymarker"  # placed inside the first 256 KiB
LATE = "zqxlatemarker"  # placed near the end


def distinct_words(size: int, seed: int) -> str:
    """About ``size`` bytes of distinct random words (a log of ids and hashes): no word repeats."""
    rng = random.Random(seed)
    return " ".join(f"{rng.getrandbits(44):011x}" for _ in range(size // 12))


def json_like(size: int) -> str:
    """Tool output shaped like a JSON API dump: keys, hyphenated ids, URLs, numbers."""
    items = []
    total = 0
    i = 0
    while total < size:
        item = json.dumps({"id": f"req-{i}-{i * 7919 % 100003}", "url": f"https://svc-{i}.example.com/v2/items/{i}?q=a-{i}",
                           "latency_ms": i * 0.37, "status": "ok" if i % 3 else "retry"})
        items.append(item)
        total += len(item) + 2
        i += 1
    return "[" + ", ".join(items) + "]"


def with_markers(text: str) -> str:
    early = 200_000
    late = len(text) - 2_000
    return f"{text[:early]} {EARLY} {text[early:late]} {LATE} {text[late:]}"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda: distinct_words(1_800_000, 1), id="log-1.8MB"),
        pytest.param(lambda: distinct_words(6_000_000, 2), id="log-6MB", marks=pytest.mark.slow),
        pytest.param(lambda: json_like(2_000_000), id="json-2MB"),
    ],
)
async def test_a_huge_tool_output_is_stored_read_back_and_found(store: Any, payload: Any) -> None:
    text = with_markers(payload())
    await store.create_session("big", "cli")
    await store.append_message("big", "user", "show me the log")
    row_id = await store.append_message("big", "tool", text, tool_name="terminal", tool_call_id="call_1")
    back = await store.get_messages("big")
    assert back[-1]["id"] == row_id and back[-1]["content"] == text and back[-1]["tool_name"] == "terminal"
    assert [hit["id"] for hit in await store.search_messages(EARLY)] == [row_id]
    late_hits = [hit["id"] for hit in await store.search_messages(LATE)]
    # SQLite's FTS5 indexes every word; PostgreSQL's vector holds the first 256 KiB.
    assert late_hits == ([] if is_postgres(store) else [row_id])


async def test_huge_content_with_huge_tool_calls_in_one_row(store: Any) -> None:
    content = with_markers(distinct_words(700_000, 3))
    calls = [{"id": "call_9", "type": "function", "function": {"name": "dump", "arguments": distinct_words(700_000, 4)}}]
    await store.create_session("both", "cli")
    row_id = await store.append_message("both", "assistant", content, tool_calls=calls)
    back = (await store.get_messages("both"))[0]
    assert back["content"] == content and back["tool_calls"] == calls
    assert [hit["id"] for hit in await store.search_messages(EARLY)] == [row_id]
