"""The README's agents demo runs as written (both providers), with no API key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _load_demo() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("agents_demo_under_test", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agents_demo_exits_non_zero_when_a_turn_fails_and_removes_its_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    demo: Any = _load_demo()
    from hermes_agent import ProviderError

    async def broken(self: object, request: object) -> object:
        raise ProviderError("the model is down")

    monkeypatch.setattr(demo.ToyProvider, "complete", broken)
    made = tmp_path / "demo-home"
    monkeypatch.setattr(demo.tempfile, "mkdtemp", lambda prefix="": (made.mkdir(), str(made))[1])
    assert demo.main(["--provider", "toy"]) == 1
    assert "agent turn failed" in capsys.readouterr().err
    assert not made.exists()  # the temporary home it created is gone


def test_agents_demo_keeps_a_home_it_was_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo: Any = _load_demo()
    home = tmp_path / "mine"
    assert demo.main(["--provider", "toy", "--home", str(home)]) == 0
    assert (home / "state.db").exists()
    made = tmp_path / "temp-home"
    monkeypatch.setattr(demo.tempfile, "mkdtemp", lambda prefix="": (made.mkdir(), str(made))[1])
    assert demo.main(["--provider", "toy"]) == 0
    assert not made.exists()
