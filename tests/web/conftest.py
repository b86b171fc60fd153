"""Fixtures of the viewer's tests: a seeded store per backend, a viewer on each, one browser.

Every test here carries ``xdist_group("web")`` (added below), so one worker
runs them all and the session-scoped stores, viewers and browser exist once
per test run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.support import SeededStore, Viewer, new_store, open_target, run_seed

BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.xdist_group("web"))


@pytest.fixture(scope="session", params=BACKEND_PARAMS)
def seeded_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    db, drop = new_store(request.param, tmp_path_factory.mktemp(f"web-{request.param}"))
    try:
        yield SeededStore(request.param, db, run_seed(lambda: open_target(db)))
    finally:
        drop()


@pytest.fixture(scope="session")
def web_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-home")


@pytest.fixture(scope="session")
def viewer(seeded_store: SeededStore, web_home: Path) -> Any:
    """The viewer on the seeded store of each backend, for every test that only reads."""
    running = Viewer(web_home, seeded_store.db)
    try:
        yield running
    finally:
        running.stop()
