"""Shared fixtures: every test gets its own HERMES_HOME and real databases.

The ``store`` fixture runs a test once per backend: SQLite on a fresh file,
PostgreSQL in a fresh schema on the server from ``HERMES_TEST_POSTGRES_DSN``
(see ``postgres_support``). A module or test limits its backends with
``pytestmark = pytest.mark.backends("sqlite")`` (or a decorator), e.g.
while its methods are not implemented on PostgreSQL yet; the default is
every backend in ``BACKENDS``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster

from hermes_state import SessionDB

# Copies of shared/fixtures live in the repo so a fresh clone passes on its own.
FIXTURES = Path(os.environ.get("HERMES_FIXTURES", Path(__file__).resolve().parent / "fixtures"))

# Backends the `store` fixture runs on unless a module or test says otherwise.
BACKENDS = ("sqlite", "postgres")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backends")
    names = tuple(marker.args) if marker is not None else BACKENDS
    unknown = set(names) - set(BACKENDS)
    if unknown:
        raise pytest.UsageError(f"unknown backend(s) {sorted(unknown)} in @pytest.mark.backends")
    metafunc.parametrize("store", names, indirect=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Install ``pg_trgm`` in the test database's ``public`` schema once, before any test runs.

    A store that finds no ``pg_trgm`` creates it in the first schema of its
    search path: for a test, its own throwaway schema. Dropping that schema
    drops the extension and, with it, the trigram index of every other test's
    store, which parallel workers (pytest-xdist) would see mid-test. One copy
    in ``public``, made by the controller before the workers start, avoids
    that; tests that need a database without it make their own.
    """
    if hasattr(session.config, "workerinput") or not os.environ.get("HERMES_TEST_POSTGRES_DSN", "").strip():
        return
    import asyncio

    try:
        from tests.postgres_support import server_dsn
    except ImportError:  # this file copied on its own (tests/test_ci_guards.py runs such copies)
        return

    async def install() -> None:
        import asyncpg

        try:
            conn = await asyncpg.connect(server_dsn(), timeout=10)
        except (OSError, asyncpg.PostgresError):
            return  # the PostgreSQL tests themselves report the unreachable server
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        except asyncpg.PostgresError:
            pass  # no privilege or no extension: stores fall back to ILIKE scans, and the tests say so
        finally:
            await conn.close()

    asyncio.run(install())


# Fixtures that reach the PostgreSQL server are named pg_* (pg_dsn, pg_admin_dsn, a module's pg_pair, ...).
POSTGRES_FIXTURE_PREFIX = "pg_"


def all_tests() -> bool:
    """Whether this run includes the ``slow`` tests (``HERMES_ALL_TESTS=1``; ``.ci/run`` sets it)."""
    return os.environ.get("HERMES_ALL_TESTS") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every PostgreSQL test ``postgres`` and every browser test ``browser`` (select them with ``-m``).

    .ci/run's second pass (the interpreter's sqlite3) deselects both: the
    driver variable changes nothing on PostgreSQL or in the browser, and CI
    time is bounded. Without ``HERMES_ALL_TESTS=1`` the ``slow`` tests (long
    stress and process runs that repeat what quicker tests cover) are
    deselected, so a newcomer's run stays short; CI runs everything.
    """
    for item in items:
        callspec = getattr(item, "callspec", None)
        # Any parameter (``store``, ``backend``, ...) that puts the test on PostgreSQL.
        on_postgres = callspec is not None and (
            any(isinstance(value, str) and value == "postgres" for value in callspec.params.values())
            or "postgres" in callspec.id.split("-")
        )
        uses_server = any(name.startswith(POSTGRES_FIXTURE_PREFIX) for name in getattr(item, "fixturenames", ()))
        if on_postgres or uses_server or item.path.name.startswith("test_postgres"):
            item.add_marker(pytest.mark.postgres)
        if item.path.name == "test_browser.py":
            item.add_marker(pytest.mark.browser)
    if all_tests():
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
        config.stash[_SLOW_LEFT_OUT] = len(slow)


_SLOW_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    left_out = config.stash.get(_SLOW_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"{left_out} slow test(s) left out (stress and process runs); HERMES_ALL_TESTS=1 runs them, as CI does"
        )


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
def no_blocking_calls() -> Iterator[None]:
    """Fail any blocking call (file system, sleep, sync socket or sqlite3) that the store makes on an event loop.

    BlockBuster is active for the whole test, fixtures included; it checks only
    calls made on a thread that runs an event loop, and only those with a frame
    of ``hermes_state`` on the stack: what a test itself does on the loop to set
    things up is the test's business, what the store does there is not. The
    ``hermes-state`` command owns its process and runs outside any loop.
    """
    blocker = BlockBuster(scanned_modules=["hermes_state"])
    # The package imports its drivers and backends on first use (a short
    # CLI start-up); an import reads files once per process, which BlockBuster
    # itself already exempts for os.stat.
    for function in blocker.functions.values():
        function.can_block_in("<frozen importlib._bootstrap>", "_find_and_load")
    blocker.activate()
    try:
        yield
    finally:
        blocker.deactivate()


@pytest.fixture(autouse=True)
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "state.db"


@pytest.fixture
async def pg_dsn() -> AsyncIterator[str]:
    """A ``postgresql+asyncpg://`` URL pinned to a fresh schema of its own, dropped after the test."""
    from .postgres_support import server_dsn, store_dsn, temporary_schema

    admin = server_dsn()
    async for schema in temporary_schema(admin):
        yield store_dsn(admin, schema)


@pytest.fixture
def pg_admin_dsn() -> str:
    """The server's ``postgresql://`` URL for raw asyncpg inspection (skips/fails like ``pg_dsn``)."""
    from .postgres_support import server_dsn

    return server_dsn()


async def fresh_store(backend: str, db_path: Path) -> AsyncIterator[Any]:
    """Yield a fresh writable store on ``backend`` (SQLite at ``db_path``, or a schema of its own); close it after."""
    if backend == "postgres":
        from hermes_state.postgres import SessionDB as PostgresSessionDB

        from .postgres_support import server_dsn, store_dsn, temporary_schema

        admin = server_dsn()
        async for schema in temporary_schema(admin):
            db: Any = PostgresSessionDB(store_dsn(admin, schema))
            try:
                yield db
            finally:
                await db.close()
        return
    db = SessionDB(db_path)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def store(request: pytest.FixtureRequest, db_path: Path) -> AsyncIterator[Any]:
    """A fresh writable store on the parametrised backend, closed after the test."""
    async for db in fresh_store(request.param, db_path):
        yield db


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
