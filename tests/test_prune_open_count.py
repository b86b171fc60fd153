"""``count_open_prune_matches`` (upstream 2026-08, spec §2.6): prune's predicate with the ended guard inverted.

Upstream's PostgreSQL backend drops every keyword filter (§6.7a); here each
filter is checked on both backends against what ``list_prune_candidates``
selects once the same sessions have ended.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from hermes_state import SessionDB
from tests.raw_sql import raw_exec, set_columns

DAY = 86_400.0


async def open_session(db: SessionDB, session_id: str, *, age_days: float, messages: int = 0, **kwargs: Any) -> None:
    """An open session whose start (and messages) lie ``age_days`` in the past."""
    await db.create_session(session_id, kwargs.pop("source", "cli"), **kwargs)
    stamp = time.time() - age_days * DAY
    if messages:
        await db.append_messages_batch(
            session_id, [{"role": "user", "content": f"{session_id} {i}", "timestamp": stamp} for i in range(messages)]
        )
    await set_columns(db, session_id, started_at=stamp)


async def test_only_the_ended_guard_is_inverted(store: SessionDB) -> None:
    """Upstream's portable test: an open and an ended session, both 120 days old."""
    for sid in ("open", "ended"):
        await open_session(store, sid, age_days=120, messages=1)
    await store.end_session("ended", "done")
    await set_columns(store, "ended", ended_at=time.time() - 120 * DAY)
    assert await store.count_open_prune_matches() == 1
    assert await store.count_open_prune_matches(older_than_days=30) == 1
    assert await store.count_open_prune_matches(older_than_days=200) == 0
    assert [c["id"] for c in await store.list_prune_candidates(older_than_days=30)] == ["ended"]
    assert await store.prune_sessions(older_than_days=None) == 1
    assert await store.get_session("ended") is None
    assert await store.get_session("open") is not None  # counting made nothing prunable
    assert await store.count_open_prune_matches() == 1
    assert await store.prune_sessions(older_than_days=None) == 0


# (filters, the sessions they select)
FILTER_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, ["a", "b"]),
    ({"source": "tui"}, ["b"]),
    ({"title_like": "100%"}, ["a"]),  # % is a literal character
    ({"title_like": "DEPLOY"}, ["a", "b"]),
    ({"cwd_prefix": "/w/p_1"}, ["a"]),  # _ is a literal character
    ({"min_messages": 2}, ["a"]),
    ({"max_messages": 2}, ["b"]),
    ({"archived": True}, ["b"]),
    ({"archived": False}, ["a"]),
    ({"model_like": "gpt"}, ["a"]),
    ({"provider": "openai"}, ["a"]),
    ({"user_id": "u1", "chat_id": "c1", "chat_type": "dm"}, ["a"]),
    ({"chat_type": "group"}, []),
    ({"branch_like": "FEATURE"}, ["a"]),
    ({"min_tokens": 1000}, ["a"]),
    ({"max_tokens": 999}, ["b"]),
    ({"min_cost": 1.0}, ["a"]),  # b's actual cost wins over its estimate
    ({"max_cost": 1}, ["b"]),
    ({"min_tool_calls": 4, "max_tool_calls": 4}, ["a"]),
    ({"end_reason": "user_exit"}, ["a"]),
    ({"started_before": time.time() - 3 * DAY}, ["a"]),
    ({"started_after": time.time() - 3 * DAY}, ["b"]),
    ({"last_active_before": time.time() - 3 * DAY}, ["a"]),
    ({"last_active_after": time.time() - 3 * DAY}, ["b"]),
    ({"older_than_days": 3}, ["a"]),
    ({"older_than_days": 0.5}, ["a", "b"]),
    ({"older_than_days": 10}, []),
    ({"older_than_days": 10, "last_active_before": time.time()}, ["a", "b"]),  # an explicit cutoff wins
    ({"older_than_days": 3, "source": "cli", "min_messages": 3}, ["a"]),
]


async def test_every_prune_filter_counts_what_a_prune_would_select(store: SessionDB) -> None:
    await open_session(store, "a", age_days=5, messages=3, model="GPT-big", cwd="/w/p_1")
    await set_columns(store, "a", title="Deploy 100% done", billing_provider="OpenAI", user_id="u1", chat_id="c1",
                      chat_type="dm", git_branch="feature/x", input_tokens=500, output_tokens=500,
                      estimated_cost_usd=2.0, tool_call_count=4, end_reason="user_exit")
    await open_session(store, "b", age_days=1, messages=1, model="small", cwd="/w/p11", source="tui")
    await set_columns(store, "b", title="Deploy 1000 done", archived=1, actual_cost_usd=0.5, estimated_cost_usd=9.0)

    counts = [await store.count_open_prune_matches(**filters) for filters, _ in FILTER_CASES]
    assert counts == [len(expected) for _, expected in FILTER_CASES]
    assert await store.list_prune_candidates(older_than_days=None) == []

    await raw_exec(store, "UPDATE sessions SET ended_at = started_at")  # nothing else changes
    for filters, expected in FILTER_CASES:
        assert [c["id"] for c in await store.list_prune_candidates(**filters)] == expected, filters
        assert await store.count_open_prune_matches(**filters) == 0, filters


async def test_open_sessions_have_no_end_reason(store: SessionDB) -> None:
    """Upstream observed 0 on SQLite and 2 on its PostgreSQL backend."""
    await open_session(store, "x", age_days=1, messages=1)
    await open_session(store, "y", age_days=1)
    assert await store.count_open_prune_matches(end_reason="done") == 0
    assert await store.count_open_prune_matches(min_messages=1) == 1
    await store.end_session("y", "done")
    await store.reopen_session("y")  # reopening clears the reason
    assert await store.count_open_prune_matches(end_reason="done") == 0
    assert await store.count_open_prune_matches() == 2


async def test_hidden_pinned_and_compression_status_do_not_matter(store: SessionDB) -> None:
    for sid in ("hidden", "pinned", "root"):
        await open_session(store, sid, age_days=40)
    await store.set_session_hidden("hidden", True)
    await store.set_session_pinned("pinned", True)
    await store.end_session("root", "compression")
    await store.create_session("tip", "cli", parent_session_id="root")
    await set_columns(store, "tip", started_at=time.time() - 40 * DAY)
    assert await store.count_open_prune_matches(older_than_days=30) == 3  # hidden, pinned, tip


async def test_bad_arguments_fail_at_the_call_site_like_prune(store: SessionDB) -> None:
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"title_contains": "x"}, TypeError, "unknown session filter"),
        ({"older_than_days": -1}, ValueError, "older_than_days must be non-negative"),
        ({"older_than_days": "90"}, TypeError, "older_than_days"),
        ({"older_than_days": math.nan}, ValueError, "finite"),
        ({"source": 5}, TypeError, "source"),
        ({"min_messages": "3"}, TypeError, "min_messages"),
        ({"min_messages": 2.5}, TypeError, "min_messages"),
        ({"min_cost": math.inf}, ValueError, "min_cost"),
        ({"archived": "no"}, TypeError, "archived"),
        ({"title_like": 3}, TypeError, "title_like"),
        ({"last_active_before": "yesterday"}, TypeError, "last_active_before"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            await store.count_open_prune_matches(**kwargs)
        with pytest.raises(error, match=message):  # the same refusal as prune's
            await store.prune_sessions(**kwargs)
    assert "unopened" in repr(store)  # refused before any I/O
    with pytest.raises(TypeError):
        await store.count_open_prune_matches(30, "cli", None)  # type: ignore[misc]  # sessions_dir is prune's only
