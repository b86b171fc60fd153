"""Fixtures of the viewer's tests: a seeded store per backend, a viewer on each, one browser.

Every test here carries ``xdist_group("web")`` (added below), so one worker
runs them all and the session-scoped stores, viewers and browser exist once
per test run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.support import BACKEND_PARAMS, CHROMIUM, SeededStore, Viewer, chromium_args, new_store, open_tab, open_target, run_seed



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


@pytest.fixture(scope="module")
def browser() -> Any:
    """Debian's headless chromium through Playwright (never a browser Playwright downloads).

    One per module (the browser tests live in one): while it is open,
    Playwright's synchronous API keeps an event loop running in this thread,
    which the worker's later asyncio tests must not find.
    """
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=chromium_args())
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def tab(browser: Any, viewer: Viewer) -> Any:
    """A page in a fresh browser context; ``tab.requests`` lists every URL it asked for.

    Requests to any host but the viewer's are recorded and aborted, so a
    failure shows up as an assertion, never as traffic leaving the machine.
    """
    yield from open_tab(browser, viewer)
