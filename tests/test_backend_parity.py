"""Both backends register the same reads and writes, and every read a public method names exists on both."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from hermes_state.postgres.handlers import BULK_HANDLERS as PG_BULK
from hermes_state.postgres.handlers import HANDLERS as PG_HANDLERS
from hermes_state.postgres.queries import QUERIES as PG_QUERIES
from hermes_state.sqlite.handlers import BULK_HANDLERS as SQLITE_BULK
from hermes_state.sqlite.handlers import HANDLERS as SQLITE_HANDLERS
from hermes_state.sqlite.queries import QUERIES as SQLITE_QUERIES

from .raw_sql import set_columns, store_target

PACKAGE = Path(__file__).resolve().parent.parent / "hermes_state"

# Names registered on one backend only, each with the reason. Empty today:
# a public call that reaches a query or command must work on both.
ONE_BACKEND_QUERIES: dict[str, str] = {}
ONE_BACKEND_COMMANDS: dict[str, str] = {}
# Bulk paths are optional speed-ups (the writer falls back to one by one).
ONE_BACKEND_BULK: dict[str, str] = {}


def _one_sided(left: set[str], right: set[str], allowed: dict[str, str]) -> list[str]:
    return sorted((left ^ right) - set(allowed))


# The layers above the backends: they name queries and commands, never a driver or SQL.
NEUTRAL_MODULES = (
    "facade.py", "actor.py", "store.py", "backend.py", "conversation.py", "rules.py", "methods", "commands", "search_text",
)
DRIVERS = {"sqlite3", "aiosqlite", "pysqlite3", "asyncpg"}
# The one sanctioned reach down: the facade builds the default (SQLite) backend.
ALLOWED_BACKEND_IMPORTS = {("facade.py", ".sqlite.backend")}


def _imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # function bodies included
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append("." * node.level + (node.module or ""))
    return found


def test_layers_above_the_backends_import_no_driver_and_no_backend() -> None:
    offending = []
    for name in NEUTRAL_MODULES:
        target = PACKAGE / name
        for path in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            rel = path.relative_to(PACKAGE).as_posix()
            for module in _imports(path):
                parts = module.lstrip(".").split(".")
                backend = module.startswith(".") and parts[0] in ("sqlite", "postgres")
                if parts[0] in DRIVERS or (backend and (rel, module) not in ALLOWED_BACKEND_IMPORTS):
                    offending.append(f"{rel}: {module}")
    assert offending == []


def test_backends_import_nothing_of_each_other() -> None:
    # What both need (the query sanitizer, bounded snippets, shared rules) lives above them.
    offending = []
    for own, other in (("sqlite", "postgres"), ("postgres", "sqlite")):
        for path in sorted((PACKAGE / own).rglob("*.py")):
            depth = len(path.relative_to(PACKAGE).parts) - 1
            for module in _imports(path):
                dots = len(module) - len(module.lstrip("."))
                parts = module.lstrip(".").split(".")
                # "..postgres" from sqlite/x.py, "...postgres" from sqlite/queries/x.py
                if (dots == depth + 1 and parts[0] == other) or module.startswith(f"hermes_state.{other}"):
                    offending.append(f"{path.relative_to(PACKAGE).as_posix()}: {module}")
    assert offending == []


def test_query_registries_agree() -> None:
    assert _one_sided(set(SQLITE_QUERIES), set(PG_QUERIES), ONE_BACKEND_QUERIES) == []


def test_handler_registries_agree() -> None:
    sqlite = {t.__name__ for t in SQLITE_HANDLERS}
    postgres = {t.__name__ for t in PG_HANDLERS}
    assert _one_sided(sqlite, postgres, ONE_BACKEND_COMMANDS) == []
    bulk_sqlite = {t.__name__ for t in SQLITE_BULK}
    bulk_postgres = {t.__name__ for t in PG_BULK}
    assert _one_sided(bulk_sqlite, bulk_postgres, ONE_BACKEND_BULK) == []


def _command_types() -> set[type]:
    import hermes_state.commands  # noqa: F401  (imports every command module)
    from hermes_state.commands.base import Command

    found: set[type] = set()
    pending = list(Command.__subclasses__())
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_command_has_a_handler_on_both_backends() -> None:
    commands = _command_types()
    assert len(commands) > 30
    assert sorted(c.__name__ for c in commands - set(SQLITE_HANDLERS)) == []
    assert sorted(c.__name__ for c in commands - set(PG_HANDLERS)) == []


def _queries_named_above_the_backends() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if {"sqlite", "postgres"} & set(path.relative_to(PACKAGE).parts[:-1]):
            continue
        names.update(re.findall(r'_query\(\s*"(\w+)"', path.read_text(encoding="utf-8")))
    return names


def test_every_query_the_facade_names_exists_on_both_backends() -> None:
    named = _queries_named_above_the_backends()
    assert {"session_ids_matching", "integrity_problems", "compression_leases", "get_session"} <= named
    assert sorted(named - set(SQLITE_QUERIES)) == []
    assert sorted(named - set(PG_QUERIES) - set(ONE_BACKEND_QUERIES)) == []


# ------------------------------------------------------------ search_sessions_by_id fallback


def _store_without_listing(store: Any) -> Any:
    """A store of ``store``'s class and database built without ``list_sessions_rich``.

    ``search_sessions_by_id`` then answers through the ``session_ids_matching``
    read instead of the listing query.
    """
    cls = type("StoreWithoutListing", (type(store),), {"list_sessions_rich": None})
    return cls(store_target(store))


async def test_search_sessions_by_id_without_a_listing_method(store: Any) -> None:
    await store.create_session("abc", "cli", system_prompt="be brief")
    await store.create_session("x-abc", "telegram")
    await store.create_session("abc-sub", "cli", parent_session_id="abc", model_config={"_delegate_from": "abc"})
    await store.create_session("abc-branch", "cli", parent_session_id="abc", model_config={"_branched_from": "abc"})
    await store.create_session("abc-reset", "cli", parent_session_id="abc", model_config={"_reset_from": "abc"})
    await store.create_session("abc-tool", "tool", parent_session_id="abc")  # a plain child: not listable
    await store.create_session("abc-old", "cli")
    await store.create_session("abc-archived", "cli")
    await store.create_session("ÄBC-latin", "cli")  # SQLite's lower() folds ASCII only
    for sid, started in (("abc", 10.0), ("abc-old", 5.0), ("abc-branch", 20.0), ("abc-reset", 15.0),
                         ("x-abc", 1.0), ("abc-archived", 30.0), ("ÄBC-latin", 2.0)):
        await set_columns(store, sid, started_at=started)
    await set_columns(store, "abc-archived", archived=1)
    await store.append_message("x-abc", "user", "recent")
    db = _store_without_listing(store)
    try:
        rows = await db.search_sessions_by_id("ABC")
        # exact, then prefixes (freshest first), then substrings; no subagent runs or plain children
        assert [r["id"] for r in rows] == ["abc", "abc-archived", "abc-branch", "abc-reset", "abc-old", "x-abc"]
        assert list(rows[0])[-1] == "last_active"
        assert set(rows[0]) == {*(await store.get_session("abc")), "last_active"}
        assert rows[0]["system_prompt"] == "be brief"
        assert [r["id"] for r in await db.search_sessions_by_id("abc", include_archived=False)] == [
            "abc", "abc-branch", "abc-reset", "abc-old", "x-abc",
        ]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", source="telegram")] == ["x-abc"]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", sources=["telegram", "cli"], limit=2)] == [
            "abc", "abc-archived",
        ]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", exclude_sources=["cli"])] == ["x-abc"]
        assert [r["id"] for r in await db.search_sessions_by_id("abc", limit=2)] == ["abc", "abc-archived"]
        assert [r["id"] for r in await db.search_sessions_by_id("äbc")] == []
        assert [r["id"] for r in await db.search_sessions_by_id("bc-lat")] == ["ÄBC-latin"]
        assert len(await db.search_sessions_by_id("abc", limit=2**63 - 1)) == 6
        assert await db.search_sessions_by_id("  ") == []
    finally:
        await db.close()


async def test_the_fallback_and_the_listing_find_the_same_sessions(store: Any) -> None:
    for sid in ("deploy-1", "deploy-2", "x-deploy", "other"):
        await store.create_session(sid, "cli")
    db = _store_without_listing(store)
    try:
        fallback = [r["id"] for r in await db.search_sessions_by_id("deploy")]
    finally:
        await db.close()
    listed = [r["id"] for r in await store.search_sessions_by_id("deploy")]
    assert fallback == listed and sorted(listed) == ["deploy-1", "deploy-2", "x-deploy"]

