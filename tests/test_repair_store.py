"""``leases()`` and ``repair_store()`` on both backends: what is safe to fix in place, and nothing else.

Defects are planted with raw SQL (the API cannot make them), then the repair
must fix exactly them: drifted ``message_count`` values go back to the rows
held, legitimately different counters (a rewind, a compaction) stay, expired
leases go and live ones stay.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .raw_sql import fetch_rows, raw_exec, store_target


async def counts(db: Any) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in await fetch_rows(db, "SELECT id, message_count FROM sessions ORDER BY id")}


async def plant_expired_lease(db: Any, session_id: str, holder: str, ago: float = 600.0) -> None:
    now = time.time()
    await raw_exec(
        db, "INSERT INTO compression_locks (session_id, holder, acquired_at, expires_at) VALUES (?, ?, ?, ?)",
        (session_id, holder, now - ago - 300, now - ago),
    )


async def test_a_clean_store_needs_nothing(store: Any) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "hello")
    assert await store.repair_store() == {"ok": True, "steps": [], "problems": [], "integrity": "ok"}
    assert await counts(store) == {"s": 1}


async def test_drifted_counters_go_back_to_the_rows_and_legitimate_ones_stay(store: Any) -> None:
    for session_id, n in (("plain", 4), ("zero", 3), ("over", 2), ("rewound", 4), ("compacted", 5), ("empty", 0)):
        await store.create_session(session_id, "cli")
        if n:
            await store.append_messages_batch(session_id, [{"role": "user", "content": f"{session_id} {i}"} for i in range(n)])
    ids = [m["id"] for m in await store.get_messages("rewound")]
    await store.rewind_to_message("rewound", ids[2])  # counts 4 while 2 rows are inactive: right
    await store.archive_and_compact("compacted", [{"role": "user", "content": "summary"}])  # counts 1 of 6 rows: right
    before = await counts(store)
    assert (before["rewound"], before["compacted"]) == (4, 1)
    await raw_exec(store, "UPDATE sessions SET message_count = 9 WHERE id = 'plain'")
    await raw_exec(store, "UPDATE sessions SET message_count = 0 WHERE id = 'zero'")  # delete_empty_sessions bait
    await raw_exec(store, "UPDATE sessions SET message_count = 7 WHERE id IN ('over', 'compacted', 'empty')")
    report = await store.repair_store()
    assert report["steps"] == [
        "recounted message_count of 5 session(s): compacted 7 -> 6, empty 7 -> 0, over 7 -> 2, plain 9 -> 4, zero 0 -> 3"
    ]
    assert report["ok"] is True and report["integrity"] == "ok"
    assert await counts(store) == {"compacted": 6, "empty": 0, "over": 2, "plain": 4, "rewound": 4, "zero": 3}
    assert (await store.repair_store())["steps"] == []  # nothing left to do


async def test_expired_leases_go_and_live_ones_stay(store: Any) -> None:
    for session_id in ("s1", "s2", "s3"):
        await store.create_session(session_id, "cli")
    assert await store.try_acquire_compression_lock("s1", "pid=1:task=live", ttl_seconds=300)
    await plant_expired_lease(store, "s2", "crashed-worker")
    await plant_expired_lease(store, "s3", "older-crash", ago=3600)
    leases = await store.leases()
    assert [(r["kind"], r["key"], r["holder"], r["live"]) for r in leases] == [
        ("compression", "s3", "older-crash", False),
        ("compression", "s2", "crashed-worker", False),
        ("compression", "s1", "pid=1:task=live", True),
    ]
    assert all(isinstance(r["acquired_at"], float) and isinstance(r["expires_at"], float) for r in leases)
    report = await store.repair_store()
    assert report["steps"] == ["removed 2 expired compression lease(s): s2 of crashed-worker, s3 of older-crash"]
    assert [(r["key"], r["live"]) for r in await store.leases()] == [("s1", True)]
    assert await store.refresh_compression_lock("s1", "pid=1:task=live")  # the live holder still holds it


async def test_many_at_once_are_counted_and_a_few_named(store: Any) -> None:
    for i in range(7):
        await store.create_session(f"s{i}", "cli")
        await store.append_message(f"s{i}", "user", "x")
    await raw_exec(store, "UPDATE sessions SET message_count = 5")
    [step] = (await store.repair_store())["steps"]
    assert step == "recounted message_count of 7 session(s): s0 5 -> 1, s1 5 -> 1, s2 5 -> 1, s3 5 -> 1, s4 5 -> 1 and 2 more"


async def test_a_read_only_store_refuses(store: Any) -> None:
    await store.create_session("s", "cli")
    reader = type(store)(store_target(store), read_only=True)
    try:
        with pytest.raises(Exception, match="read-only|readonly"):
            await reader.repair_store()
        assert await reader.leases() == []
    finally:
        await reader.close()
