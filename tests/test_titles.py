"""Session titles: sanitizing, uniqueness, provenance ranks, lookups and lineage numbering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hermes_state import SessionDB
from tests.test_compression import raw_exec

# PostgreSQL: this module's methods are not on that backend yet (issue 11 phase 2); drop the mark when they are.
pytestmark = pytest.mark.backends("sqlite")


async def sessions(db: SessionDB, *ids: str) -> None:
    for sid in ids:
        await db.create_session(sid, "cli")


async def title_state(db: SessionDB, sid: str) -> tuple[str | None, str | None]:
    row = await db.get_session(sid)
    assert row is not None
    return row["title"], row["title_source"]


# ------------------------------------------------------------------ sanitize


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (None, None),
        ("", None),
        ("   \t\n ", None),
        ("  Deploy   the\tapp \n", "Deploy the app"),
        ("a\x00b\x07c\x7fd", "abcd"),
        ("zero\u200bwidth\u202eflip\u2066iso\ufeffbom\ufffcobj\ufff9ann", "zerowidthflipisobomobjann"),
        ("line\u2028sep", "linesep"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("日本語のタイトル", "日本語のタイトル"),
        ("x" * 100, "x" * 100),
    ],
)
def test_sanitize_title(raw: str | None, clean: str | None) -> None:
    assert SessionDB.sanitize_title(raw) == clean


def test_sanitize_title_limits() -> None:
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        SessionDB.sanitize_title("y" * 101)
    # Length counts after cleaning.
    assert SessionDB.sanitize_title(" " * 50 + "z" * 100 + "\u200b" * 20) == "z" * 100
    with pytest.raises(TypeError):
        SessionDB.sanitize_title(12)  # type: ignore[arg-type]


async def test_title_validation_happens_before_io(db_path: Path) -> None:
    db = SessionDB(db_path)
    with pytest.raises(ValueError, match="Title too long"):
        await db.set_session_title("s", "q" * 200)
    with pytest.raises(ValueError, match="^invalid automatic title source: 'user'$"):
        await db.set_auto_title("s", "t", source="user")
    with pytest.raises(ValueError, match="^invalid title source: 'robot'$"):
        await db.set_session_title_source("s", "robot")
    assert not db_path.exists()
    await db.close()
    # Pure helpers keep working after close.
    assert db.sanitize_title(" ok ") == "ok"


# ----------------------------------------------------------------- set / get


async def test_set_get_and_clear(store: SessionDB) -> None:
    await sessions(store, "s")
    assert await store.get_session_title("s") is None
    assert await store.get_session_title_source("s") is None
    assert await store.set_session_title("s", "  My   session ")
    assert await title_state(store, "s") == ("My session", "user")
    assert await store.get_session_title("s") == "My session"
    assert await store.get_session_title_source("s") == "user"
    assert await store.set_session_title("s", "   ")  # clears
    assert await title_state(store, "s") == (None, None)
    assert not await store.set_session_title("ghost", "Nope")
    assert await store.get_session_title("ghost") is None


async def test_titles_are_unique(store: SessionDB) -> None:
    await sessions(store, "a", "b")
    assert await store.set_session_title("a", "Shared")
    with pytest.raises(ValueError, match="^Title 'Shared' is already in use by session a$"):
        await store.set_session_title("b", "Shared")
    with pytest.raises(ValueError, match="already in use"):
        await store.set_auto_title("b", "Shared", source="llm")
    assert await title_state(store, "b") == (None, None)
    assert await store.set_session_title("a", "Shared")  # re-setting your own title is fine


async def test_title_moves_from_a_compression_ancestor(store: SessionDB) -> None:
    await sessions(store, "p", "unrelated")
    assert await store.set_auto_title("p", "Long chat", source="llm")
    await store.publish_compression_child(
        parent_session_id="p", child_session_id="c", source="cli",
        messages=[{"role": "user", "content": "summary"}], require_compression_lease=False,
    )
    await store.publish_compression_child(
        parent_session_id="c", child_session_id="d", source="cli",
        messages=[{"role": "user", "content": "summary 2"}], require_compression_lease=False,
    )
    assert await store.set_session_title("d", "Long chat")  # grandparent hands it over
    assert await title_state(store, "p") == (None, None)
    assert await title_state(store, "d") == ("Long chat", "user")
    # A descendant is not an ancestor: the title does not move back up.
    with pytest.raises(ValueError, match="in use by session d"):
        await store.set_session_title("p", "Long chat")
    # Nor does it move from a session outside the lineage.
    assert await store.set_session_title("unrelated", "Other")
    with pytest.raises(ValueError, match="in use by session unrelated"):
        await store.set_session_title("d", "Other")


async def test_title_does_not_move_from_a_branch_parent(store: SessionDB) -> None:
    await sessions(store, "p")
    await store.set_session_title("p", "Origin")
    await store.end_session("p", "compression")
    await store.create_session("b", "cli", parent_session_id="p", model_config={"_branched_from": "p"})
    with pytest.raises(ValueError, match="in use by session p"):
        await store.set_session_title("b", "Origin")


# ---------------------------------------------------------------- provenance


async def test_automatic_titles_respect_authority(store: SessionDB) -> None:
    await sessions(store, "s")
    assert await store.set_auto_title("s", "Derived", source="derived")
    assert not await store.set_auto_title("s", "Derived again", source="derived")  # equal rank
    assert await store.set_auto_title("s", "Model title", source="llm")  # upgrade
    assert not await store.set_auto_title("s", "Older", source="derived")
    assert not await store.set_auto_title_if_empty("s", "Another llm title")
    assert await title_state(store, "s") == ("Model title", "llm")
    assert await store.set_session_title("s", "Mine")  # users always win
    assert not await store.set_auto_title("s", "Late model title", source="llm")
    assert await title_state(store, "s") == ("Mine", "user")


async def test_title_without_provenance_counts_as_user(store: SessionDB, db_path: Path) -> None:
    await sessions(store, "s", "t")
    raw_exec(db_path, "UPDATE sessions SET title = 'Legacy' WHERE id = 's'")
    assert await store.get_session_title_source("s") is None
    assert not await store.set_auto_title("s", "Generated", source="llm")
    assert await store.set_auto_title_if_empty("t", "Generated")
    assert await title_state(store, "t") == ("Generated", "llm")
    assert not await store.set_auto_title("ghost", "x", source="derived")


async def test_set_title_source(store: SessionDB) -> None:
    await sessions(store, "s")
    assert not await store.set_session_title_source("s", "user")  # untitled
    await store.set_auto_title("s", "Copied", source="derived")
    assert await store.set_session_title_source("s", "user")
    assert await title_state(store, "s") == ("Copied", "user")
    assert not await store.set_session_title_source("ghost", "llm")


# ------------------------------------------------------------------ lookups


async def test_lookup_by_title(store: SessionDB) -> None:
    await store.create_session("s", "cli", system_prompt="SYS")
    await store.set_session_title("s", "Exact")
    found = await store.get_session_by_title("Exact")
    assert found == await store.get_session("s")
    assert found is not None and found["system_prompt"] == "SYS"
    assert await store.get_session_by_title("exact") is None
    assert await store.resolve_session_by_title("Exact") == "s"
    assert await store.resolve_session_by_title("Missing") is None


async def test_resolve_prefers_the_newest_numbered_continuation(store: SessionDB, db_path: Path) -> None:
    for sid, title, started in (("s1", "Chat", 1.0), ("s2", "Chat #2", 3.0), ("s3", "Chat #3", 2.0),
                                ("x1", "CHAT #9", 9.0), ("x2", "Chat #final", 9.0), ("x3", "Chat_50%", 9.0)):
        await sessions(store, sid)
        await store.set_session_title(sid, title)
        raw_exec(db_path, "UPDATE sessions SET started_at = ? WHERE id = ?", (started, sid))
    assert await store.resolve_session_by_title("Chat") == "s2"  # newest by start, not by number
    assert await store.resolve_session_by_title("Chat_50%") == "x3"
    assert await store.resolve_session_by_title("Chat #2") == "s2"


async def test_next_title_in_lineage(store: SessionDB) -> None:
    assert await store.get_next_title_in_lineage("Fresh") == "Fresh"
    await sessions(store, "a", "b", "c", "d")
    await store.set_session_title("a", "Topic")
    assert await store.get_next_title_in_lineage("Topic") == "Topic #2"
    await store.set_session_title("b", "Topic #2")
    await store.set_session_title("c", "Topic #7")
    await store.set_session_title("d", "topic #40")  # other case: another title
    assert await store.get_next_title_in_lineage("Topic") == "Topic #8"
    assert await store.get_next_title_in_lineage("Topic #2") == "Topic #8"
    assert await store.get_next_title_in_lineage("100% done #3") == "100% done"


async def test_two_stores_racing_for_one_title(db_path: Path) -> None:
    first, second = SessionDB(db_path), SessionDB(db_path)
    try:
        await sessions(first, *(f"s{i}" for i in range(8)))
        await second.get_meta("open")
        results = await asyncio.gather(
            *((first if i % 2 else second).set_session_title(f"s{i}", "Contested") for i in range(8)),
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if r is True]
        assert len(winners) == 1
        assert all(isinstance(r, ValueError) and "already in use" in str(r) for r in results if r is not True)
        assert (await first.get_session_by_title("Contested") or {}).get("id") == f"s{winners[0]}"
    finally:
        await first.close()
        await second.close()
