"""A store whose opening is cancelled leaves no connection thread behind (SQLite).

aiosqlite connects on a thread of its own; a caller cancelled while that
connect runs (Ctrl-C in the command, a timeout in a host) must not leave the
thread to finish after the event loop closed, where it reports to a closed
loop (a traceback on stderr) and keeps its connection open. Each round
cancels the first call at a later point of the opening, in a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .cli_support import cli_env

SCRIPT = """
import asyncio, sys, threading
from hermes_state import SessionDB

async def cancel_after(path, steps):
    db = SessionDB(path)
    call = asyncio.ensure_future(db.create_session("s", "cli"))
    for _ in range(steps):
        await asyncio.sleep(0)
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        pass
    await db.close()

for steps in range(60):
    asyncio.run(cancel_after(sys.argv[1], steps))
    for worker in [t for t in threading.enumerate() if "_connection_worker_thread" in t.name]:
        worker.join(timeout=10)  # a closed connection's thread ends a moment after close() returns
        assert not worker.is_alive(), (steps, worker)
print("ok")
"""


def test_a_cancelled_open_leaves_no_thread_and_no_traceback(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "state.db")], capture_output=True, text=True,
                          env=cli_env(tmp_path), cwd=str(tmp_path), timeout=240)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout + done.stderr
    # Nothing but, with a SQLite that has the WAL-reset bug, the store's notice of its journal.
    assert [line for line in done.stderr.splitlines() if "WAL-reset bug" not in line] == []
