"""The suite's own guard: under HERMES_FORBID_SKIPS=1 (as .ci/run sets) a skip fails unless its reason is allowed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = '''
import pytest

def test_skips_for_no_good_reason():
    pytest.skip("nothing to see")

def test_needs_extension_loading():
    pytest.skip("this SQLite driver cannot load extensions")

def test_runs():
    assert True
'''


def _run(tmp_path: Path, forbid: bool) -> subprocess.CompletedProcess[str]:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    # Only the plugins the suite's conftest needs: loading every installed one (LangSmith's,
    # Hypothesis's, ...) would cost this subprocess most of its time.
    env = dict(os.environ, HERMES_FORBID_SKIPS="1" if forbid else "0", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pytest_asyncio", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.slow  # a pytest run in a subprocess
def test_forbidden_skip_fails_and_the_allowed_one_stays_a_skip(tmp_path: Path) -> None:
    run = _run(tmp_path, forbid=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed, 1 skipped" in run.stdout
    assert "allows no skip for this reason" in run.stdout and "nothing to see" in run.stdout


@pytest.mark.slow  # a pytest run in a subprocess
def test_without_the_flag_skips_are_plain_skips(tmp_path: Path) -> None:
    run = _run(tmp_path, forbid=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 skipped" in run.stdout
