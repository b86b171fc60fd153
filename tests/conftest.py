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
