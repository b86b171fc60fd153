"""Private by default: what the store creates has no group or other permission bits, whatever the umask.

``tests/file_modes_probe.py`` creates every kind of file in a fresh process
under the umask given (022, the usual one, and 000, the worst); this module
checks the modes it reports, and that ``doctor`` warns about store files
others can read and says how to fix them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .cli_support import REPO, build_store, cli_env, run_cli, run_json

PRIVATE_FILES = (
    "open db", "api export", "nested db", "existing dir db", "rollback journal db", "rollback journal",
    "cli export", "cli export over a 0644 file", "repair backup", "salvaged db", "moved aside",
    "quarantined zeroed file", "fresh db after quarantine",
)


@pytest.mark.parametrize("umask", ["022", "000"])
def test_everything_the_store_creates_is_private(tmp_path: Path, umask: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "tests" / "file_modes_probe.py"), umask, str(tmp_path)],
                          capture_output=True, text=True, env=cli_env(tmp_path), cwd=str(REPO), timeout=240)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert {label: found[label] for label in PRIVATE_FILES} == dict.fromkeys(PRIVATE_FILES, "0o600")
    # A SQLite with the WAL-reset bug runs the store on a rollback journal: no -wal/-shm then.
    sidecars = "0o600" if found["journal mode"] == "wal" else None
    assert (found["open wal"], found["open shm"]) == (sidecars, sidecars)
    # Directories the store makes are the owner's alone; one that existed keeps its mode.
    assert (found["open home"], found["nested a"], found["nested b"]) == ("0o700", "0o700", "0o700")
    assert found["existing dir dir"] == "0o755"


def test_an_existing_home_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o750)
    assert run_cli(home, "quickstart").returncode == 0
    assert home.stat().st_mode & 0o777 == 0o750
    assert (home / "state.db").stat().st_mode & 0o777 == 0o600


async def test_doctor_warns_about_a_readable_store_and_says_how_to_fix_it(tmp_path: Path) -> None:
    path = tmp_path / "data" / "state.db"
    await build_store(path)
    assert (path.stat().st_mode & 0o777) == 0o600
    report = run_json(tmp_path, "--db", str(path), "doctor")
    assert next(c for c in report["checks"] if c["check"] == "permissions")["status"] == "ok"

    os.chmod(path, 0o644)  # what releases before this one created
    done = run_cli(tmp_path, "--db", str(path), "doctor")
    assert done.returncode == 0, done.stdout + done.stderr  # a warning, not a failure
    line = next(line for line in done.stdout.splitlines() if "permissions" in line)
    assert line.startswith("WARN  permissions") and "state.db 0644" in line
    assert line.endswith(f"run: chmod 600 {path}")
    report = run_json(tmp_path, "--db", str(path), "doctor")
    assert report["ok"] is True

    os.system(f"chmod 600 {path}")  # the advice, followed
    report = run_json(tmp_path, "--db", str(path), "doctor")
    assert next(c for c in report["checks"] if c["check"] == "permissions")["status"] == "ok"


def test_doctor_names_every_exposed_sidecar(tmp_path: Path) -> None:
    """The permissions check on its own (no SQLite between, which would adopt or recreate sidecars)."""
    from hermes_state.cli.inspect import _permissions_check

    path = tmp_path / "state.db"
    for suffix, mode in (("", 0o640), ("-wal", 0o604), ("-shm", 0o600)):
        Path(f"{path}{suffix}").write_bytes(b"x")
        os.chmod(f"{path}{suffix}", mode)
    check = _permissions_check(path)
    assert check["status"] == "warn"
    assert "(state.db 0640, state.db-wal 0604)" in check["detail"]  # the -shm file is private
    assert check["detail"].endswith(f"chmod 600 {path} {path}-wal")
    for suffix in ("", "-wal"):
        os.chmod(f"{path}{suffix}", 0o600)
    assert _permissions_check(path)["status"] == "ok"
