"""Other projects' own tests, run against hermes-state in place of their stores.

Three suites, each in a virtual environment of its own under ``--workdir``:

upstream
    async-hermes-agent (``--repo``, a path or URL, at ``--rev``) is cloned,
    its dependencies with the ``dev`` and ``postgres`` extras are installed
    (not the project itself: its wheel would put its own ``hermes_state.py``
    on the path), its store modules are deleted from the clone
    (``hermes_state.py``, ``hermes_state_postgres.py`` and
    ``hermes_state_common.py``, each one hermes-state ships an import path
    of),
    hermes-state is installed, and every test file under ``tests/`` that
    names the store runs in a pytest process of its own, as upstream's
    runner does. Files that read ``HERMES_POSTGRES_TEST_DSN`` each get a
    fresh database on the server of ``--dsn`` (dropped afterwards): some
    assert on everything a search finds.
agents
    The OpenAI Agents SDK's session tests (``tests/memory/test_session.py``,
    ``test_session_limit.py``) from its source distribution, with
    ``agents.SQLiteSession`` replaced by ``HermesSession`` on a ``SessionDB``
    at the test's path (``bench/upstream_plugins/agents_sqlite_session.py``).
langchain
    langchain-core's chat-history and ``RunnableWithMessageHistory`` tests
    (``tests/unit_tests/chat_history``, ``runnables/test_history.py``),
    under its own blockbuster fixture, with ``InMemoryChatMessageHistory``
    replaced by ``HermesChatMessageHistory``
    (``bench/upstream_plugins/langchain_history.py``).

The packages' versions are the ones installed beside this interpreter
(``--agents-version`` / ``--langchain-version`` override). Nothing of theirs
is copied into this project: sources are downloaded into ``--workdir``.

Usage::

    python bench/upstream_suite.py                      # all three, fresh temp dir
    python bench/upstream_suite.py --workdir /tmp/us --suites upstream --files tests/state
    python bench/upstream_suite.py --workdir /tmp/us    # reuse the venvs; reinstalls hermes-state

Prints one line per test file (passed/failed/errors/skipped) and totals;
``--report FILE`` writes every test's outcome and failure text as JSON.
Needs network access to PyPI. At most ``--jobs`` pytest processes at a time.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PROJECT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "upstream_plugins"
DEFAULT_REPO = "/work/.mirror/ykoh42+async-hermes-agent/repo"
DEFAULT_REV = "71d9c845e"
# Upstream's store modules; each one hermes-state supplies under the same import path is deleted from the clone.
STORE_MODULES = ("hermes_state", "hermes_state_postgres", "hermes_state_common")
STORE_MARKER = re.compile(r"hermes_state|SessionDB")
PG_ENV = "HERMES_POSTGRES_TEST_DSN"


@dataclass
class FileResult:
    path: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float = 0.0
    note: str = ""
    failures: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def make_venv(path: Path, python: str) -> Path:
    """A virtual environment at ``path`` (kept if it exists); returns its interpreter."""
    exe = path / "bin" / "python"
    if not exe.exists():
        run([python, "-m", "venv", str(path)])
        run([str(exe), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    return exe


def pip(exe: Path, *args: str) -> None:
    run([str(exe), "-m", "pip", "install", "-q", *args])


def install_hermes_state(exe: Path, project: Path, extras: str) -> None:
    """Install hermes-state from ``project`` (a fresh build every run, so fixes are picked up)."""
    pip(exe, f"{project}[{extras}]")
    pip(exe, "--no-deps", "--force-reinstall", "--no-cache-dir", str(project))


def supplied_modules(exe: Path) -> list[str]:
    """Which of upstream's store modules the hermes-state installed beside ``exe`` provides."""
    probe = "import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n)))"
    out = subprocess.run([str(exe), "-c", probe, *STORE_MODULES], cwd="/", capture_output=True, text=True, check=True)
    return out.stdout.split()


def installed_version(name: str) -> str:
    return importlib.metadata.version(name)


# --------------------------------------------------------------------------- classifying failures

# First match wins. "internals": the test reaches into the reference implementation (private
# attributes and module names, its SQLAlchemy engine, its mixin classes, its source text), which
# a drop-in store need not have; the others are behaviour a host sees.
CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("blocking call on the loop", r"BlockingError"),
    ("leaked store task", r"Leaked (Task|task)"),
    ("event loop binding", r"another event loop|different event loop|WriterStoppedError|attached to a different loop"),
    ("coroutine where upstream has one", r"can't be used in 'await' expression|object \w+ can't be awaited"
                                         r"|'str' object has no attribute '__cause__'|sqlite_source_id"
                                         r"|'Result' object has no attribute 'fetchone'|unexpected keyword argument 'db_label'"),
    ("internals", r"has no attribute '_|does not have the attribute '_|cannot import name '_|'_engine'"
                  r"|No such file or directory: '[^']*hermes_state[\w.]*\.py'|issubclass\(SessionDB, \w+Mixin\)"
                  r"|from hermes_state_(common|schema|search|portability) import|SessionSchemaMixin|SessionSearchMixin"
                  r"|SessionPortabilityMixin|cannot import name '\w+' from 'hermes_state_common'"
                  r"|monkeypatch\.setattr\(\s*hermes_state\b|monkeypatch\.setattr\(\s*\"hermes_state\."),
))


def cause_of(text: str) -> str:
    for name, pattern in CAUSES:
        if pattern.search(text):
            return name
    return "other"


# --------------------------------------------------------------------------- running pytest


def parse_junit(path: Path, result: FileResult) -> None:
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        text = ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
                text = (child.get("message") or "") + "\n" + (child.text or "")
                break
        if outcome == "passed":
            result.passed += 1
        elif outcome == "skipped":
            result.skipped += 1
        else:
            if outcome == "failure":
                result.failed += 1
            else:
                result.errors += 1
            result.failures[name] = text.strip()[-4000:]


def run_pytest_file(
    exe: Path, cwd: Path, target: str, env: dict[str, str], extra: list[str], timeout: float
) -> FileResult:
    result = FileResult(target)
    with tempfile.TemporaryDirectory(prefix="hs-junit-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [str(exe), "-m", "pytest", target, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *extra]
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            tail = proc.stdout[-3000:] + proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            tail = f"timed out after {timeout:.0f}s"
            result.note = "timeout"
        result.seconds = time.monotonic() - started
        if xml.exists():
            parse_junit(xml, result)
        if result.total == 0 and result.skipped == 0:
            result.errors += 1
            result.note = result.note or "no results (collection or start-up failed)"
            result.failures[f"{target}::<file>"] = tail
    return result


def run_files(
    exe: Path, cwd: Path, files: list[str], env_for, extra: list[str], jobs: int, timeout: float
) -> list[FileResult]:
    results: list[FileResult] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_pytest_file, exe, cwd, f, env_for(f), extra, timeout): f for f in files}
        for future in concurrent.futures.as_completed(futures):
            res = future.result()
            results.append(res)
            print(
                f"  {res.path:<78} {res.passed:4d} passed {res.failed:4d} failed {res.errors:3d} errors "
                f"{res.skipped:3d} skipped {res.seconds:6.1f}s {res.note}",
                flush=True,
            )
    return sorted(results, key=lambda r: r.path)


# --------------------------------------------------------------------------- PostgreSQL databases


def database_dsn(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def psql(dsn: str, sql: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn, "-c", sql], check=True, capture_output=True)


class Databases:
    """Fresh databases on the server (created and dropped here; the server itself is never reconfigured)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.names: list[str] = []

    def fresh(self) -> str:
        """A new database's URL in upstream's CI form (``postgresql+psycopg://``; its stores take no other)."""
        name = f"hs_upstream_{uuid.uuid4().hex[:12]}"
        psql(self.dsn, f"CREATE DATABASE {name}")
        self.names.append(name)
        return "postgresql+psycopg://" + database_dsn(self.dsn, name).split("://", 1)[1]

    def drop_all(self) -> None:
        for name in self.names:
            try:
                psql(self.dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            except subprocess.CalledProcessError as exc:
                print(f"could not drop {name}: {exc.stderr}", file=sys.stderr)


# --------------------------------------------------------------------------- suites


def upstream_requirements(checkout: Path) -> list[str]:
    meta = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(meta["dependencies"])
    for extra in ("dev", "postgres"):
        reqs += meta["optional-dependencies"][extra]
    return reqs


def upstream_store_files(checkout: Path) -> list[str]:
    found = []
    for path in sorted((checkout / "tests").rglob("test_*.py")):
        if STORE_MARKER.search(path.read_text(encoding="utf-8", errors="replace")):
            found.append(str(path.relative_to(checkout)))
    return found


def suite_upstream(args, workdir: Path) -> list[FileResult]:
    checkout = workdir / "async-hermes-agent"
    if not checkout.exists():
        run(["git", "clone", "-q", "--no-checkout", args.repo, str(checkout)])
        run(["git", "-C", str(checkout), "checkout", "-q", args.rev])
    else:
        run(["git", "-C", str(checkout), "checkout", "-q", "--force", args.rev])
    exe = make_venv(workdir / "venv-upstream", args.python)
    pip(exe, *upstream_requirements(checkout))
    install_hermes_state(exe, args.project, "postgres")
    for name in supplied_modules(exe):
        (checkout / f"{name}.py").unlink(missing_ok=True)
    files = upstream_store_files(checkout)
    if args.files:
        files = [f for f in files if any(f.startswith(prefix) for prefix in args.files)]
    pg_files = {f for f in files if PG_ENV in (checkout / f).read_text(encoding="utf-8", errors="replace")}
    dbs = Databases(args.dsn)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HERMES_", "VIRTUAL_ENV"))}
    base_env["PATH"] = f"{exe.parent}:{base_env.get('PATH', '')}"

    def env_for(target: str) -> dict[str, str]:
        env = dict(base_env)
        if target in pg_files:
            env[PG_ENV] = dbs.fresh()
        return env

    print(f"upstream {args.rev}: {len(files)} test files that touch the store ({len(pg_files)} on PostgreSQL)")
    try:
        return run_files(exe, checkout, files, env_for, [], args.jobs, args.timeout)
    finally:
        dbs.drop_all()


def unpack_sdist(exe: Path, workdir: Path, name: str, version: str) -> Path:
    dest = workdir / f"sdist-{name}-{version}"
    if not dest.exists():
        download = workdir / "downloads"
        download.mkdir(exist_ok=True)
        run([str(exe), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", f"{name}=={version}",
             "-d", str(download)])
        stem = f"{name}_{version}".replace("-", "_")
        archive = next(p for p in download.iterdir()
                       if p.name.lower().replace("-", "_").startswith(stem) and p.name.endswith(".tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(workdir / "unpacked", filter="data")
        shutil.move(str(workdir / "unpacked" / archive.name.removesuffix(".tar.gz")), dest)
    return dest


def adapters_env(args, workdir: Path) -> Path:
    exe = make_venv(workdir / "venv-adapters", args.python)
    pip(exe, f"openai-agents=={args.agents_version}", f"langchain-core=={args.langchain_version}",
        "pytest", "pytest-asyncio", "pytest-mock", "pytest-timeout", "blockbuster", "freezegun", "syrupy")
    install_hermes_state(exe, args.project, "openai-agents,langchain")
    return exe


def suite_plugin(args, workdir: Path, exe: Path, package: str, version: str, files: list[str], plugin: str
                 ) -> list[FileResult]:
    source = unpack_sdist(exe, workdir, package, version)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = str(PLUGINS)
    # A test that hangs fails alone (its file's other results are kept).
    extra = ["-p", plugin, "-o", "addopts=", f"--timeout={args.test_timeout:g}"]
    print(f"{package} {version}: {len(files)} test files, store plugin {plugin}")
    return run_files(exe, source, files, lambda _f: env, extra, args.jobs, args.timeout)


def summarise(report: Path) -> None:
    """Print the failures of a saved ``--report`` by cause (``--summarise FILE``)."""
    data = json.loads(report.read_text(encoding="utf-8"))
    for suite, files in data.items():
        causes: dict[str, list[str]] = {}
        for res in files:
            for name, text in res["failures"].items():
                causes.setdefault(cause_of(text), []).append(name)
        passed = sum(r["passed"] for r in files)
        run_ = sum(r["passed"] + r["failed"] + r["errors"] for r in files)
        print(f"{suite}: {passed} / {run_} passed")
        for cause, names in sorted(causes.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(names):4d}  {cause}")
            if cause != "internals":
                for name in names:
                    print(f"          {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=DEFAULT_REPO, help="async-hermes-agent: a path or URL git can clone")
    parser.add_argument("--rev", default=DEFAULT_REV)
    parser.add_argument("--workdir", type=Path, help="kept between runs (default: a new temporary directory)")
    parser.add_argument("--suites", default="upstream,agents,langchain")
    parser.add_argument("--files", nargs="*", help="upstream test paths (prefixes) to run instead of all")
    parser.add_argument("--dsn", default=os.environ.get("HERMES_TEST_POSTGRES_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--project", type=Path, default=PROJECT, help="the hermes-state source tree to install")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per test file")
    parser.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test (framework suites)")
    parser.add_argument("--python", default=sys.executable, help="interpreter the venvs are made from")
    parser.add_argument("--agents-version", default=None)
    parser.add_argument("--langchain-version", default=None)
    parser.add_argument("--list-failures", action="store_true", help="name every failure not caused by internals")
    parser.add_argument("--report", type=Path, help="write every failure's text here (JSON)")
    parser.add_argument("--summarise", type=Path, help="only print the failures of a saved report by cause")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return 0
    args.agents_version = args.agents_version or installed_version("openai-agents")
    args.langchain_version = args.langchain_version or installed_version("langchain-core")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hs-upstream-suite-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work directory: {workdir}")
    suites = args.suites.split(",")
    totals: dict[str, list[FileResult]] = {}
    if "upstream" in suites:
        totals["upstream"] = suite_upstream(args, workdir)
    if "agents" in suites or "langchain" in suites:
        exe = adapters_env(args, workdir)
        if "agents" in suites:
            totals["agents"] = suite_plugin(
                args, workdir, exe, "openai-agents", args.agents_version,
                ["tests/memory/test_session.py", "tests/memory/test_session_limit.py"], "agents_sqlite_session")
        if "langchain" in suites:
            totals["langchain"] = suite_plugin(
                args, workdir, exe, "langchain-core", args.langchain_version,
                ["tests/unit_tests/chat_history/test_chat_history.py", "tests/unit_tests/runnables/test_history.py"],
                "langchain_history")
    for suite, results in totals.items():
        causes: dict[str, list[str]] = {}
        for res in results:
            for name, text in res.failures.items():
                causes.setdefault(cause_of(text), []).append(name)
        if causes:
            print(f"\n{suite}: failures by cause")
            for cause, names in sorted(causes.items(), key=lambda kv: -len(kv[1])):
                print(f"  {len(names):4d}  {cause}")
                if cause != "internals" and args.list_failures:
                    for name in names:
                        print(f"          {name}")
    print("\nsuite        passed / run   (failed, errors, skipped)")
    for suite, results in totals.items():
        passed = sum(r.passed for r in results)
        run_ = sum(r.total for r in results)
        print(f"{suite:<12} {passed:6d} / {run_:<5d} ({sum(r.failed for r in results)}, "
              f"{sum(r.errors for r in results)}, {sum(r.skipped for r in results)})")
    if args.report:
        args.report.write_text(json.dumps(
            {suite: [vars(r) for r in results] for suite, results in totals.items()}, indent=1), encoding="utf-8")
        print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
