"""The command's start-up stays light: ``--help`` loads no driver, no store and no serializer.

Speed itself is measured by ``bench/cli_startup.py`` (a timed test would be
flaky on a shared machine); what makes it fast is checked here, in fresh
interpreters: the modules ``--help`` imports, for the top level and for every
command and sub-command, and the package's lazy names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .cli_support import cli_env, run_cli

# What no help text needs: drivers, serializers, the event loop, the store and its backends.
HEAVY = (
    "asyncio", "aiosqlite", "asyncpg", "sqlite3", "pysqlite3", "msgspec", "yaml", "tqdm",
    "hermes_state.store", "hermes_state.facade", "hermes_state.actor", "hermes_state.config",
    "hermes_state.commands", "hermes_state.methods", "hermes_state.sqlite", "hermes_state.postgres",
    "hermes_state.integrations", "hermes_agent",
)

EVERY_HELP = """
import contextlib, io, json, sys
from hermes_state.cli import build_parser, main
import argparse

def paths(parser, prefix):
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from paths(sub, prefix + [name])

heavy = tuple(sys.argv[1:])
before = {m for m in sys.modules if m.startswith(heavy)}
seen = []
for path in paths(build_parser(), []):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main([*path, "--help"])
    assert code == 0 and "usage: hermes-state" in out.getvalue(), (path, code)
    seen.append(" ".join(path))
loaded = sorted(m for m in sys.modules if m.startswith(heavy) and m not in before)
print(json.dumps({"helps": seen, "heavy": loaded, "preloaded": sorted(before)}))
"""


def run_python(home: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (so ``sys.modules`` starts empty); fails the test if it fails."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env=cli_env(home), cwd=str(home), timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_every_help_text_loads_no_heavy_module(tmp_path: Path) -> None:
    done = run_python(tmp_path, EVERY_HELP, *HEAVY)
    found = json.loads(done.stdout)
    assert found["preloaded"] == []  # importing hermes_state.cli itself loads none of them
    assert {"", "copy", "export", "import", "doctor", "sessions", "sessions list", "quickstart"} <= set(found["helps"])
    assert found["heavy"] == [], f"--help imported {found['heavy']}: import them where the command runs"


def test_python_m_help_loads_no_heavy_module(tmp_path: Path) -> None:
    """``python -m hermes_state --help`` as a user types it, with the modules it loaded printed at exit."""
    script = (
        "import atexit, sys, runpy\n"
        "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules)) + '\\n'))\n"
        "sys.argv = ['hermes_state', '--help']\n"
        "runpy.run_module('hermes_state', run_name='__main__', alter_sys=True)\n"
    )
    done = run_python(tmp_path, script)
    assert "usage: hermes-state" in done.stdout
    modules = done.stderr.rsplit("MODULES ", 1)[1].split()
    assert [m for m in modules if m.startswith(HEAVY)] == []


def test_the_package_loads_its_names_on_first_use(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        "import hermes_state\n"
        "light = 'hermes_state.store' not in sys.modules and 'aiosqlite' not in sys.modules\n"
        "db_class = hermes_state.SessionDB\n"
        "from hermes_state import *\n"
        "names = {n: n in globals() for n in hermes_state.__all__}\n"
        "import hermes_state.store\n"
        "print(json.dumps({'light': light, 'same': db_class is hermes_state.store.SessionDB,\n"
        "                  'star': names, 'dir': set(hermes_state.__all__) <= set(dir(hermes_state)),\n"
        "                  'version': hermes_state.SCHEMA_VERSION, 'path': str(hermes_state.DEFAULT_DB_PATH)}))\n"
        "try:\n"
        "    hermes_state.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    first, second = run_python(tmp_path, script).stdout.splitlines()
    found = json.loads(first)
    assert found["light"] is True and found["same"] is True and found["dir"] is True
    assert all(found["star"].values()), [n for n, ok in found["star"].items() if not ok]
    assert found["version"] == 25 and found["path"] == str(tmp_path / "state.db")
    assert second == "module 'hermes_state' has no attribute 'no_such_name'"


def test_help_lists_the_signal_exit_codes(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "--help")
    assert done.returncode == 0
    assert "130  interrupted (Ctrl-C, SIGINT)" in done.stdout and "143  terminated (SIGTERM)" in done.stdout
