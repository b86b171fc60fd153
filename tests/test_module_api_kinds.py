"""The module-level functions hermes_state exports have the reference's kinds and parameters.

The reference (async-hermes-agent 71d9c845e: hermes_state.py and its
hermes_state_* modules) defines the names below as ``async def``; hosts
``await`` them. The table is written out here, not read from the reference's
source, so the test runs without it.
"""

from __future__ import annotations

import inspect

import pytest

import hermes_state

P = inspect.Parameter
POS, KW = P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY
NO = P.empty

# name -> [(parameter, kind, default)], as the reference declares them.
COROUTINES: dict[str, list[tuple[str, object, object]]] = {
    "resolved_max_resume_messages": [],
    "resolved_max_export_messages": [],
    "sqlite_source_id": [],
    "resolve_journal_mode": [],
    "apply_wal_with_fallback": [("conn", POS, NO), ("db_label", KW, "state.db"), ("require_wal", KW, False)],
    "apply_database_pragmas": [("conn", POS, NO), ("db_label", KW, "state.db")],
    "repair_state_db_schema": [("db_path", POS, NO), ("backup", KW, True)],
    "preflight_db_writability": [("db_path", POS, NO), ("db_label", KW, "state.db")],
    "is_zeroed_state_db": [("path", POS, NO), ("probe_bytes", KW, 100), ("force", KW, False)],
    "quarantine_zeroed_state_db": [("path", POS, NO)],
    "fts5_cjk_so_path": [],
    "load_fts5_cjk_extension": [("conn", POS, NO)],
}

# Plain functions in the reference too (so a host calls them without await).
FUNCTIONS = (
    "get_last_init_error", "format_session_db_unavailable", "is_sqlite_wal_reset_vulnerable", "workspace_key",
    "is_disk_full_error", "classify_persistence_error", "_cjk_fts_config_enabled", "_default_db_path",
)


@pytest.mark.parametrize("name", sorted(COROUTINES))
def test_the_references_coroutines_are_coroutines_with_its_parameters(name: str) -> None:
    function = getattr(hermes_state, name)
    assert inspect.iscoroutinefunction(function), f"{name} must be async def, as in the reference"
    parameters = [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]
    assert parameters == COROUTINES[name]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_references_plain_functions_stay_plain(name: str) -> None:
    function = getattr(hermes_state, name)
    assert callable(function) and not inspect.iscoroutinefunction(function)


def test_every_exported_coroutine_is_in_the_table() -> None:
    exported = {
        name for name in hermes_state.__all__
        if inspect.iscoroutinefunction(getattr(hermes_state, name, None))
    }
    assert exported == set(COROUTINES)
