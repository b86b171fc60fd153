"""Issue 29 item 5: reads on read replicas, and this store's own writes always visible to its reads.

A streaming standby of the tests' own (``tests/pg_cluster.py``) serves as the
replica. Its replay is paused with ``pg_wal_replay_pause()`` to make it lag
for certain, so a read that ignored the store's own write position would
miss the write.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermes_state.errors import ConfigError
from hermes_state.postgres import SessionDB
from hermes_state.postgres.config import parse_postgres_config
from hermes_state.postgres.replicas import format_lsn, parse_lsn

from .pg_cluster import Cluster, Instance, pg_primary, wait_replayed  # noqa: F401  (the fixture)


def _url(instance: Instance) -> str:
    return f"postgresql+asyncpg://postgres@127.0.0.1:{instance.port}/postgres"


def _config(home: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    (home / "config.yaml").write_text("database:\n  postgres:\n" + text)
    monkeypatch.setenv("HERMES_HOME", str(home))


async def _texts(db: SessionDB) -> list[str]:
    return [m["content"] for m in await db.get_messages("s")]


def test_replica_settings_are_validated() -> None:
    with pytest.raises(TypeError, match="read_replicas"):
        SessionDB("postgresql+asyncpg://h/db", read_replicas="postgresql+asyncpg://r/db")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"read_replicas\[1\]"):
        SessionDB("postgresql+asyncpg://h/db", read_replicas=["postgresql+asyncpg://r/db", "postgresql://r/db"])
    with pytest.raises(ConfigError, match=r"read_replicas\[0\]"):
        parse_postgres_config({"read_replicas": ["mysql://x/db"]})
    with pytest.raises(ConfigError, match="replica_max_lag"):
        parse_postgres_config({"replica_max_lag": 0})
    assert parse_lsn("16/B374D848") == (0x16 << 32) + 0xB374D848
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"


async def test_reads_go_to_the_replica_and_always_see_this_stores_own_writes(
    pg_primary: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standby = await asyncio.to_thread(pg_primary.add_standby)
    _config(tmp_path, monkeypatch, "    replica_wait: 1.0\n")  # headroom for replay on a loaded machine
    async with SessionDB(_url(pg_primary.primary), read_replicas=[_url(standby)]) as db:
        await db.create_session("s", "cli")
        expected: list[str] = []
        for i in range(20):  # streaming: the replica catches up, waited for when needed
            expected.append(f"m{i}")
            await db.append_message("s", "user", f"m{i}")
            assert await _texts(db) == expected
        routed = (await db.writer_stats())["read_routing"]
        assert routed["replica"] >= 10 and routed["replica"] + routed["primary"] == 20, routed
        assert routed["replicas"][0]["state"] == "up" and routed["replicas"][0]["lag_seconds"] is not None

        await asyncio.to_thread(standby.sql, "SELECT pg_wal_replay_pause()")  # now it lags for certain
        for i in range(3):
            expected.append(f"paused{i}")
            await db.append_message("s", "user", f"paused{i}")
            assert await _texts(db) == expected  # from the primary, after a bounded wait
        paused = (await db.writer_stats())["read_routing"]
        assert paused["behind_own_write"] >= 3 and paused["replica"] == routed["replica"], paused

        await asyncio.to_thread(standby.sql, "SELECT pg_wal_replay_resume()")
        assert await _texts(db) == expected
        resumed = (await db.writer_stats())["read_routing"]
        assert resumed["replica"] == paused["replica"] + 1, resumed  # caught up: the replica answers again


async def test_a_lagging_replica_is_skipped_and_a_down_one_too(
    pg_primary: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    standby = await asyncio.to_thread(pg_primary.add_standby)
    # From config.yaml this time; a read-only store has no writes of its own to wait for.
    _config(tmp_path, monkeypatch, f"    read_replicas: ['{_url(standby)}']\n    replica_max_lag: 0.3\n")
    async with SessionDB(_url(pg_primary.primary)) as writer, SessionDB(_url(pg_primary.primary), read_only=True) as reader:
        await writer.create_session("s", "cli")
        await writer.append_message("s", "user", "one")
        await wait_replayed(standby, "SELECT count(*) FROM messages", "1")
        assert await _texts(reader) == ["one"]
        assert (await reader.writer_stats())["read_routing"]["replica"] == 1
        await asyncio.to_thread(standby.sql, "SELECT pg_wal_replay_pause()")
        await writer.append_message("s", "user", "two")
        await asyncio.sleep(1.0)  # > replica_max_lag behind, and past the lag reading's lifetime
        assert await _texts(reader) == ["one", "two"]
        lagging = (await reader.writer_stats())["read_routing"]
        assert lagging["skipped_lagging"] >= 1 and lagging["replicas"][0]["state"] == "lagging", lagging

        await asyncio.to_thread(standby.stop, "immediate")
        await writer.append_message("s", "user", "three")
        await asyncio.sleep(0.6)
        assert await _texts(reader) == ["one", "two", "three"]  # the primary answers
        down = (await reader.writer_stats())["read_routing"]
        assert down["replicas"][0]["state"] == "down" and down["replicas"][0]["error"], down
        assert down["primary"] >= 2
