"""A store holding every kind of row a user has, and the table-by-table picture two stores are compared by.

``fill_every_kind`` writes through the public API (and raw SQL for the two
tables other components own: gateway routing and async delegations) on
either backend. ``snapshot`` reads a store back table by table, twice over:
through the row API (every column) and through the ordinary reads a host
uses (sessions, every message decoded, search), so a test compares both.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_state.tables import KEYED_TABLES, STORE_META_KEYS, STORE_META_PREFIX

from .raw_sql import fetch_rows, raw_exec

# Message content of every type the store round-trips, with its type.
CONTENTS: list[Any] = [
    "plain", "", "nul\x00inside", "\x00json:[1]", "emoji \U0001F600 and 中文", 7, 2.5, -0.0, True, False,
    {"nested": {"list": [1, 2.5, None, True, "x"]}}, [{"type": "text", "text": "part"}], b"\x00\xffraw bytes", None,
]
# A tool output larger than PostgreSQL's 1 MB tsvector limit: distinct words, as a log dump.
HUGE_LOG = " ".join(f"{i:09x}" for i in range(110_000))
ROW_COUNTS = {
    "system_prompts": 2, "state_meta": 2, "gateway_routing": 2, "async_delegations": 2, "sessions": 8,
    "messages": 32, "session_model_usage": 3,
}


async def fill_every_kind(db: Any) -> None:
    """Sessions, messages and side tables covering every column kind and flag (row counts: :data:`ROW_COUNTS`)."""
    now = time.time()
    # A compacted session: 6 originals archived (active=0, compacted=1), 2 live messages.
    await db.create_session("compacted", "cli", model="m1", system_prompt="be brief", cwd="/work", user_id="u1",
                            session_key="agent:main", chat_id="c1", chat_type="dm", thread_id="t1",
                            display_name="Ann", origin_json='{"platform": "cli"}', profile_name="default")
    await db.append_messages_batch("compacted", [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"original turn {i} about kettles"} for i in range(6)
    ])
    await db.archive_and_compact("compacted", [
        {"role": "user", "content": "summary of the kettle talk"}, {"role": "assistant", "content": "noted"},
    ])
    await db.update_token_counts("compacted", input_tokens=1200, output_tokens=340, model="m1", cache_read_tokens=5,
                                 cache_write_tokens=6, reasoning_tokens=7, estimated_cost_usd=0.0123,
                                 actual_cost_usd=0.0119, cost_status="final", cost_source="provider",
                                 pricing_version="2026-01", billing_provider="openai",
                                 billing_base_url="https://api.example.com", billing_mode="api", api_call_count=3)
    await db.record_auxiliary_usage("compacted", "title", model="m-small", input_tokens=40, output_tokens=8,
                                    estimated_cost_usd=0.0001)
    await db.set_session_title("compacted", "Kettle talk")
    await db.update_session_cwd("compacted", "/work/repo", git_branch="main", git_repo_root="/work/repo")
    await db.patch_session_model_config("compacted", {"temperature": 0.2, "tags": ["a", "b"]})
    await db.touch_session_activity("compacted", now - 5, description="compiling", provenance="tool")
    await db.set_session_read("compacted")
    await db.record_compression_failure_cooldown("compacted", now + 600, "provider timed out")
    await db.set_compression_fallback_streak("compacted", 2)
    await db.set_compression_ineffective_count("compacted", 1)
    await db.set_session_pinned("compacted", True)

    # Every content type, every message column, on one session; plus a log dump too big for a tsvector.
    await db.create_session("values", "telegram", model="m2", model_config={"nested": {"list": [1, 2.5, None, True]}})
    for content in CONTENTS:
        await db.append_message("values", "assistant", content, reasoning="why", finish_reason="stop",
                                token_count=2**63 - 1, reasoning_details=[{"summary": "r"}],
                                codex_reasoning_items=[{"id": "rs_1"}], codex_message_items=[{"id": "msg_1"}],
                                platform_message_id=12345, observed=True, effect_disposition="applied",
                                api_content="api text", display_kind="note", display_metadata={"k": "v"})
    await db.append_message("values", "assistant", None, tool_calls=[{"id": "call_1", "type": "function",
                            "function": {"name": "grep", "arguments": "{\"q\": \"x\"}"}}])
    await db.append_message("values", "tool", HUGE_LOG, tool_call_id="call_1", tool_name="grep")
    await db.update_token_counts("values", input_tokens=2**62, output_tokens=1, model="m2", estimated_cost_usd=1e300)

    # A rewound session: the rewound rows stay, inactive; rewind_count grows.
    await db.create_session("rewound", "cli")
    ids = [await db.append_message("rewound", role, text) for role, text in
           (("user", "first"), ("assistant", "answer"), ("user", "second"), ("assistant", "another"))]
    await db.rewind_to_message("rewound", ids[2])

    # A compression lineage: the parent ends with "compression", the child continues it.
    await db.create_session("lineage-root", "cli", system_prompt="other prompt")
    await db.append_message("lineage-root", "user", "before compression")
    await db.publish_compression_child(parent_session_id="lineage-root", child_session_id="lineage-tip", source="cli",
                                       messages=[{"role": "user", "content": "after compression"}],
                                       require_compression_lease=False)

    # A delegate child, an archived ended session, an empty one.
    await db.create_session("delegate", "cli", parent_session_id="compacted", model_config={"_delegate_from": "compacted"})
    await db.append_message("delegate", "user", "sub-task")
    await db.create_session("archived", "cli")
    await db.append_message("archived", "user", "old news")
    await db.end_session("archived", "done")
    await db.set_session_archived("archived", True)
    await db.create_session("empty", "cron")
    await db.set_session_hidden("empty", True)

    await db.set_meta("user_setting", "on")
    await db.set_meta("theme", "dark")
    await db.set_meta("last_vacuum", str(now))  # the store's own bookkeeping: never copied
    assert await db.try_acquire_session_turn_lease("compacted", "host:turn", ttl_seconds=60)  # a lease: never copied
    for scope, key in (("", "agent:main"), ("telegram", "chat:42")):
        await raw_exec(db, "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) VALUES (?, ?, ?, ?)",
                       (scope, key, '{"session_id": "compacted"}', now))
    for n, state in ((1, "running"), (2, "done")):
        await raw_exec(db, "INSERT INTO async_delegations (delegation_id, origin_session, parent_session_id, state, "
                           "dispatched_at, completed_at, updated_at, result_json, delivery_attempts, owner_pid, "
                           "owner_started_at, task_json) VALUES (?, 'compacted', 'compacted', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (f"del-{n}", state, now - 60, None if state == "running" else now, now, '{"ok": true}', n,
                        4000 + n, 1_700_000_000 + n, '{"goal": "x"}'))


async def snapshot(db: Any) -> dict[str, Any]:
    """Everything ``db`` holds for its users: row-API dumps per table, messages per session, and host reads."""
    tables: dict[str, Any] = {}
    for table in KEYED_TABLES:
        rows: list[dict[str, Any]] = []
        while True:
            page = await db.dump_rows(table, after=None if not rows else _key(table, rows[-1]), limit=3)
            rows += page
            if len(page) < 3:
                break
        tables[table] = rows
    messages: dict[str, list[dict[str, Any]]] = {}
    for session in tables["sessions"]:
        rows = []
        while True:
            page = await db.dump_messages(session["id"], after_id=rows[-1]["id"] if rows else None, limit=4)
            rows += page
            if len(page) < 4:
                break
        messages[session["id"]] = [{k: v for k, v in row.items() if k != "id"} for row in rows]
    tables["messages"] = messages
    reads = {
        s["id"]: {"session": await db.get_session(s["id"]),
                  "messages": [{k: v for k, v in m.items() if k != "id"}
                               for m in await db.get_messages(s["id"], include_inactive=True)]}
        for s in tables["sessions"]
    }
    found = {word: sorted(h["session_id"] for h in await db.search_messages(word, limit=50))
             for word in ("kettles", "kettle", "answer", "000001000")}
    return {"tables": tables, "reads": reads, "search": found}


def _key(table: str, row: dict[str, Any]) -> tuple[str, ...]:
    from hermes_state.tables import TABLE_KEYS

    return tuple(row[name] for name in TABLE_KEYS[table])


async def raw_counts(db: Any) -> dict[str, int]:
    """Rows per carried table counted with raw SQL (state_meta: only keys the store does not write itself)."""
    counts = {}
    for table in ROW_COUNTS:
        bookkeeping = ", ".join(f"'{key}'" for key in sorted(STORE_META_KEYS))
        where = f" WHERE key NOT LIKE '{STORE_META_PREFIX}%' AND key NOT IN ({bookkeeping})" if table == "state_meta" else ""
        counts[table] = int((await fetch_rows(db, f"SELECT count(*) FROM {table}{where}"))[0][0])
    return counts


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """``a`` and ``b`` are equal in type and value all the way down (1 is not 1.0 nor True; -0.0 is not 0.0)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} {a!r:.80} != {type(b).__name__} {b!r:.80}"
    if isinstance(a, dict):
        assert list(a) == list(b) or set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))} differ"
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: {len(a)} items != {len(b)}"
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{index}]")
    elif isinstance(a, float):
        assert repr(a) == repr(b), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r:.80} != {b!r:.80}"
