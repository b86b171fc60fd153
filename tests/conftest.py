"""Shared fixtures: every test gets its own HERMES_HOME and real database files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import AsyncIterator

import pytest

from hermes_state import SessionDB

# Copies of shared/fixtures live in the repo so a fresh clone passes on its own.
FIXTURES = Path(os.environ.get("HERMES_FIXTURES", Path(__file__).resolve().parent / "fixtures"))

# Backends the core tests run on. PostgreSQL joins this list when its backend lands.
BACKENDS = ["sqlite"]


# The only skip CI accepts: CJK tests that need SQLite extension loading, on a
# driver built without it (the interpreter's own sqlite3 here).
ALLOWED_SKIP_REASONS = ("this SQLite driver cannot load extensions",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """With ``HERMES_FORBID_SKIPS=1`` (set by .ci/run) any other skip fails the test, naming its reason."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or os.environ.get("HERMES_FORBID_SKIPS") != "1":
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    if not any(allowed in reason for allowed in ALLOWED_SKIP_REASONS):
        report.outcome = "failed"
        report.longrepr = f"skipped, but HERMES_FORBID_SKIPS=1 allows no skip for this reason: {reason}"


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "state.db"


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[SessionDB]:
    """A fresh writable store on the parametrised backend, closed after the test."""
    db = SessionDB(db_path)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
def anchor_db(tmp_path: Path) -> Path:
    """A private copy of the state.db written by async-hermes-agent (opening may migrate it)."""
    source = FIXTURES / "anchor-v25-state.db"
    if not source.exists():
        pytest.fail(f"fixture missing: {source}")
    target = tmp_path / "anchor" / "state.db"
    target.parent.mkdir()
    shutil.copyfile(source, target)
    return target
