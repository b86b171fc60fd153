"""The README's agents demo runs as written (both providers), with no API key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .test_agent_support import needs

DEMO = Path(__file__).resolve().parent.parent / "examples" / "agents_demo.py"


@needs("search_messages", "search")
@needs("get_anchored_view", "listing")
@needs("list_sessions_rich", "listing")
@pytest.mark.parametrize("provider", ["toy", "loopback"])
def test_agents_demo_runs(provider: str, tmp_path: Path) -> None:
    if provider == "loopback":
        pytest.importorskip("openai")
    home = tmp_path / "home"
    proc = subprocess.run([sys.executable, str(DEMO), "--provider", provider, "--home", str(home)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"provider: {provider}" in out
    assert "(same id: True)" in out and "now 4 rows" in out
    assert "recall: Found it in @session:default/" in out and ">>>BLUEBIRD<<<" in out
    assert "end_reason=agent_close" in out
    assert (home / "state.db").exists()
