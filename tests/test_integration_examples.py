"""The adapter examples run as written, offline, in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, home: Path) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--home", str(home)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (home / "state.db").exists()
    return proc.stdout


def test_openai_agents_example(tmp_path: Path) -> None:
    out = run_example("openai_agents_session.py", tmp_path)
    assert "alice: Your order status: A-17 shipped on Tuesday via parcel post." in out
    assert "bob again: I have 2 message(s) from you so far; the first was 'Hello there'." in out
    assert "bob's session holds 4 items" in out
    assert "search 'parcel': support-alice tool: A-17 shipped on Tuesday via >>>parcel<<< post" in out
    assert "pop_item removed bob's last item" in out


def test_langchain_example(tmp_path: Path) -> None:
    out = run_example("langchain_history.py", tmp_path)
    assert "trip    tool: rain, 9 C" in out
    assert "trip      ai: Pack a raincoat for Oslo." in out
    assert "haiku: A haiku about >>>Oslo<<<, please" in out
    assert "sync: 7 messages, last: 'Booked.'" in out
