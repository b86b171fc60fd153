"""The optional cjk_unicode61 tokenizer: built from native/fts5_cjk, loaded or absent.

With the library loaded, CJK queries of two or more characters are answered
from the bigram index (with highlighting); without it the trigram and LIKE
routes answer them. Moving a file between processes with and without the
library detaches and later rebuilds the CJK index.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.session_settings import bind_session_settings, reset_session_settings
from hermes_state.sqlite.driver import driver_module
from tests import test_search

routes = test_search.routes
log_routes = test_search.log_routes  # the fixture, shared

NATIVE = Path(__file__).resolve().parent.parent / "native" / "fts5_cjk"


@pytest.fixture(scope="session")
def cjk_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile libfts5_cjk.so once per session (skips when no compiler or headers)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build native/fts5_cjk")
    if not hasattr(driver_module().connect(":memory:"), "enable_load_extension"):
        pytest.skip("this SQLite driver cannot load extensions")
    out = tmp_path_factory.mktemp("fts5_cjk") / "libfts5_cjk.so"
    built = subprocess.run(
        [compiler, "-O2", "-Wall", "-fPIC", "-shared", str(NATIVE / "fts5_cjk.c"), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.skip(f"could not build the CJK tokenizer (sqlite3ext.h missing?): {built.stderr.strip()[:300]}")
    return out


@pytest.fixture
def with_cjk(cjk_lib: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(cjk_lib))
    return cjk_lib


CJK_OBJECTS = {
    "messages_fts_cjk",
    "messages_fts_cjk_src",
    "messages_fts_cjk_insert",
    "messages_fts_cjk_delete",
    "messages_fts_cjk_update",
}


def raw(path: Path) -> Any:
    return closing(driver_module().connect(str(path), isolation_level=None))


def objects(path: Path) -> set[str]:
    """Which of the CJK index's table, view and triggers exist."""
    with raw(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")} & CJK_OBJECTS


def meta(path: Path, key: str) -> str | None:
    with raw(path) as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


async def write_corpus(db: SessionDB) -> dict[str, int]:
    await db.create_session("s", "cli")
    return {
        "zh": await db.append_message("s", "user", "turn 0: 你好世界 deployment notes"),
        "ja": await db.append_message("s", "assistant", "カタカナとひらがな。漢字テスト"),
        "ko": await db.append_message("s", "user", "한국어 텍스트 입니다"),
        "mixed": await db.append_message("s", "assistant", "Docker容器启动失败 on ÜBER host"),
        "tool": await db.append_message("s", "tool", "工具输出 世界", tool_name="terminal"),
        "single": await db.append_message("s", "user", "just 世 alone"),
    }


# ---------------------------------------------------------------- the library


def test_tokenizer_emits_bigrams_unigrams_and_unicode61_tokens(cjk_lib: Path) -> None:
    conn = driver_module().connect(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(str(cjk_lib))
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='cjk_unicode61')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.execute("INSERT INTO t(x) VALUES ('Ünïcödé ABC你好世界def 世, 한국어')")
    terms = [r[0] for r in conn.execute("SELECT term FROM v ORDER BY offset")]
    assert terms == ["unicode", "abc", "你好", "好世", "世界", "def", "世", "한국", "국어"]
    assert conn.execute("SELECT snippet(t, -1, '[', ']', '', 10) FROM t WHERE t MATCH '\"好世界\"'").fetchone()[0] == (
        "Ünïcödé ABC你[好世界]def 世, 한국어"
    )
    conn.execute("CREATE VIRTUAL TABLE t2 USING fts5(x, tokenize='cjk_unicode61 remove_diacritics 0')")
    conn.execute("INSERT INTO t2(x) VALUES ('Ünïcödé')")
    assert conn.execute("SELECT count(*) FROM t2 WHERE t2 MATCH 'unicode'").fetchone()[0] == 0
    # Invalid UTF-8 is passed to unicode61, never decoded as CJK.
    conn.execute("INSERT INTO t(rowid, x) VALUES (2, CAST(x'ffe4bda0e5a5fe41' AS TEXT))")
    assert "你" in {r[0] for r in conn.execute("SELECT term FROM v WHERE doc = 2")}


# ----------------------------------------------------------- extension loaded


async def test_loaded_index_serves_cjk_queries(db_path: Path, with_cjk: Path, log_routes: Any) -> None:
    db = SessionDB(db_path)
    try:
        ids = await write_corpus(db)
        assert objects(db_path) == CJK_OBJECTS
        assert await db.fts_cjk_rebuild_status() is None  # created on an empty file: nothing to backfill
        two = await db.search_messages("世界")
        assert [(h["id"], h["snippet"]) for h in two] == [(ids["zh"], "turn 0: 你好>>>世界<<< deployment notes")]
        assert [h["snippet"] for h in await db.search_messages("你好世界")] == ["turn 0: >>>你好世界<<< deployment notes"]
        assert [h["id"] for h in await db.search_messages("容器")] == [ids["mixed"]]
        assert [h["id"] for h in await db.search_messages("ひらがな")] == [ids["ja"]]
        assert [h["id"] for h in await db.search_messages("텍스트")] == [ids["ko"]]
        assert routes(log_routes) == ["fts_cjk"] * 5
        # A lone CJK character is not in the bigram index: LIKE route.
        assert {h["id"] for h in await db.search_messages("世")} == {ids["zh"], ids["tool"], ids["single"]}
        # Tool rows wanted: the index skips them, so LIKE answers.
        assert [h["id"] for h in await db.search_messages("世界", role_filter=["tool"])] == [ids["tool"]]
        assert routes(log_routes)[-2:] == ["like_scan", "like_scan"]
        # Zero-hit fallback for non-CJK text tries the CJK index, then trigram.
        assert [h["id"] for h in await db.search_messages("ocker")] == [ids["mixed"]]
        assert routes(log_routes)[-1] == "trigram"
        assert await db.optimize_fts() == 3 and await db.rebuild_fts() == 3
        assert [h["id"] for h in await db.search_messages("世界")] == [ids["zh"]]
    finally:
        await db.close()
    ro = SessionDB(db_path, read_only=True)
    try:
        assert [h["id"] for h in await ro.search_messages("世界")] == [ids["zh"]]
        assert routes(log_routes)[-1] == "fts_cjk"
    finally:
        await ro.close()


async def test_library_in_hermes_home_lib_is_found(db_path: Path, cjk_lib: Path, hermes_home: Path) -> None:
    (hermes_home / "lib").mkdir()
    shutil.copy(cjk_lib, hermes_home / "lib" / "libfts5_cjk.so")
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        await db.append_message("s", "user", "数据库 ok")
        assert objects(db_path) == CJK_OBJECTS
    finally:
        await db.close()


@pytest.mark.parametrize("how", ["env", "config", "bound"])
async def test_cjk_can_be_switched_off(db_path: Path, with_cjk: Path, hermes_home: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    token = None
    if how == "env":
        monkeypatch.setenv("HERMES_CJK_FTS", "off")
    elif how == "config":
        (hermes_home / "config.yaml").write_text("sessions:\n  cjk_fts: false\n")
    else:  # a turn's per-profile setting wins over the process-wide switch
        monkeypatch.setenv("HERMES_CJK_FTS", "on")
        token = bind_session_settings({"cjk_fts": False})
    db = SessionDB(db_path)
    try:
        await db.create_session("s", "cli")
        if token is not None:
            reset_session_settings(token)
        await db.append_message("s", "user", "你好世界")
        assert objects(db_path) == set()
        assert len(await db.search_messages("世界")) == 1
    finally:
        await db.close()


async def test_index_added_to_an_existing_file_is_backfilled_before_use(db_path: Path, cjk_lib: Path, monkeypatch: pytest.MonkeyPatch, log_routes: Any) -> None:
    db = SessionDB(db_path)
    await db.create_session("s", "cli")
    await db.append_messages_batch("s", [{"role": "user", "content": f"第{i}条 数据库记录"} for i in range(1200)])
    await db.close()
    assert objects(db_path) == set()

    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(cjk_lib))
    db = SessionDB(db_path)
    try:
        status = await db.fts_cjk_rebuild_status()  # opens the store
        assert objects(db_path) == CJK_OBJECTS
        assert status == {"pending": True, "total": 1200, "indexed": 0, "percent": 0}
        assert await db.fts_optimize_available() is True
        fresh = await db.append_message("s", "user", "新的数据库记录")
        hits = await db.search_messages("数据库", limit=5)
        assert hits[0]["id"] == fresh and routes(log_routes)[-1] == "trigram"  # not served while pending
        steps = [await db.fts_cjk_rebuild_step() for _ in range(3)]
        assert steps == [True, True, False]
        assert await db.fts_cjk_rebuild_status() is None
        hits = await db.search_messages("数据库", limit=2000)
        assert len(hits) == 1201 and routes(log_routes)[-1] == "fts_cjk"
        assert all(">>>数据库<<<" in h["snippet"] for h in hits)
    finally:
        await db.close()
    with raw(db_path) as conn:
        conn.enable_load_extension(True)
        conn.load_extension(str(cjk_lib))
        conn.execute("INSERT INTO messages_fts_cjk(messages_fts_cjk) VALUES ('integrity-check')")


async def test_process_without_the_library_detaches_then_rebuild_restores(db_path: Path, cjk_lib: Path, monkeypatch: pytest.MonkeyPatch, log_routes: Any) -> None:
    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(cjk_lib))
    db = SessionDB(db_path)
    ids = await write_corpus(db)
    await db.close()

    monkeypatch.delenv("HERMES_FTS5_CJK_SO")
    db = SessionDB(db_path)
    try:
        await db.storage_info()  # opens the store
        # Triggers naming the missing tokenizer would break every insert: they are gone.
        assert objects(db_path) == {"messages_fts_cjk", "messages_fts_cjk_src"}
        assert meta(db_path, "fts_cjk_stale") == "1"
        late = await db.append_message("s", "user", "离线写入的世界")
        assert {h["id"] for h in await db.search_messages("世界")} == {ids["zh"], ids["tool"], late}
        assert routes(log_routes)[-1] == "like_scan"  # the LIKE route also sees tool rows
        assert await db.fts_optimize_available() is False  # nothing this process can do about it
    finally:
        await db.close()

    monkeypatch.setenv("HERMES_FTS5_CJK_SO", str(cjk_lib))
    db = SessionDB(db_path)
    try:
        await db.storage_info()
        assert objects(db_path) == CJK_OBJECTS and meta(db_path, "fts_cjk_stale") is None
        assert await db.fts_cjk_rebuild_status() is not None
        assert await db.optimize_fts_storage(vacuum=False) == {"ok": True, "vacuumed": None}
        hits = await db.search_messages("世界")
        assert {h["id"] for h in hits} == {ids["zh"], late} and routes(log_routes)[-1] == "fts_cjk"  # no tool rows
    finally:
        await db.close()


async def test_anchor_file_gains_a_cjk_index(anchor_db: Path, with_cjk: Path, log_routes: Any) -> None:
    db = SessionDB(anchor_db)
    try:
        before = await db.search_messages("你好世界")
        assert routes(log_routes) == ["trigram"]
        assert await db.optimize_fts_storage(vacuum=False) == {"ok": True, "vacuumed": None}
        after = await db.search_messages("你好世界")
        assert routes(log_routes)[-1] == "fts_cjk"
        assert [(h["id"], h["snippet"]) for h in after] == [(h["id"], h["snippet"]) for h in before]
    finally:
        await db.close()


async def test_public_coroutines_load_the_tokenizer_into_a_hosts_connection(with_cjk: Path, tmp_path: Path) -> None:
    import hermes_state
    from hermes_state.sqlite.driver import open_connection

    assert await hermes_state.fts5_cjk_so_path() == with_cjk
    conn = await open_connection(str(tmp_path / "host.db"))
    try:
        assert await hermes_state.load_fts5_cjk_extension(conn) is True
        row = await (await conn.execute("SELECT fts5_cjk_version()")).fetchone()
        assert row[0]
    finally:
        await conn.close()
