"""Fixtures of the viewer's tests: a seeded store per backend, a viewer on each, one browser.

The tests spread over the xdist workers like any others; a worker seeds a
backend's store and starts its viewer the first time one of its tests needs
them, and launches one browser for the browser tests it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.support import BACKEND_PARAMS, CHROMIUM, SeededStore, Viewer, chromium_args, new_store, open_tab, open_target, run_seed


class _SeededViewers:
    """Each backend's seeded store and the viewer on it, made when a test first needs them.

    A session-scoped *parametrised* fixture tears its value down whenever the
    next test wants the other backend, and a worker's share of the tests
    switches backends often: each switch rebuilt a store and its viewer (and,
    as pytest then regroups tests across modules, relaunched the per-module
    browser). Cached here, each exists once per worker.
    """

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, home: Path) -> None:
        self._tmp = tmp_path_factory
        self.home = home
        self._stores: dict[str, SeededStore] = {}
        self._viewers: dict[str, Viewer] = {}
        self._drops: list[Any] = []

    def store(self, backend: str) -> SeededStore:
        if backend not in self._stores:
            db, drop = new_store(backend, self._tmp.mktemp(f"web-{backend}"))
            self._drops.append(drop)
            self._stores[backend] = SeededStore(backend, db, run_seed(lambda: open_target(db)))
        return self._stores[backend]

    def viewer(self, backend: str) -> Viewer:
        if backend not in self._viewers:
            self._viewers[backend] = Viewer(self.home, self.store(backend).db)
        return self._viewers[backend]

    def close(self) -> None:
        for running in self._viewers.values():
            running.stop()
        for drop in self._drops:
            drop()


@pytest.fixture(scope="session")
def web_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-home")


@pytest.fixture(scope="session")
def seeded_viewers(tmp_path_factory: pytest.TempPathFactory, web_home: Path) -> Any:
    cache = _SeededViewers(tmp_path_factory, web_home)
    try:
        yield cache
    finally:
        cache.close()


@pytest.fixture(params=BACKEND_PARAMS)
def seeded_store(request: pytest.FixtureRequest, seeded_viewers: _SeededViewers) -> SeededStore:
    """The seeded store of each backend (shared by the worker's tests: they only read it)."""
    return seeded_viewers.store(request.param)


@pytest.fixture
def viewer(seeded_store: SeededStore, seeded_viewers: _SeededViewers) -> Viewer:
    """The viewer on the seeded store of each backend, for every test that only reads."""
    return seeded_viewers.viewer(seeded_store.backend)


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
