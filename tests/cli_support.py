"""Running ``python -m hermes_state`` in a subprocess on real files, and building stores for it."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from hermes_state import SessionDB

REPO = Path(__file__).resolve().parent.parent


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["HERMES_HOME"] = str(home)
    env.update(extra)
    return env


class _Zygote:
    """This test process's fork server (``tests/cli_zygote.py``), started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=cli_env(Path(tempfile.gettempdir())), cwd=str(REPO),
        )
        assert proc.stdout is not None
        if "ready" not in json.loads(proc.stdout.readline() or "{}"):
            raise RuntimeError("the command tests' fork server did not start")
        atexit.register(proc.kill)
        return proc

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            return json.loads(self._proc.stdout.readline())


_ZYGOTE = _Zygote()


def run_cli(home: Path, *args: str, stdin: bytes | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run the command as a user would (a fresh process, forked from one that imported the package once).

    Returns the finished process (text stdout/stderr). ``HERMES_CLI_SUBPROCESS=1``
    runs ``python -m hermes_state`` itself instead.
    """
    if os.environ.get("HERMES_CLI_SUBPROCESS") == "1":
        return subprocess.run(
            [sys.executable, "-m", "hermes_state", *args],
            input=None if stdin is None else stdin.decode(),
            capture_output=True, text=True, env=cli_env(home), timeout=timeout, cwd=str(home),
        )
    with tempfile.TemporaryDirectory(prefix="hs-cli-") as streams:
        paths = {name: os.path.join(streams, name) for name in ("stdin", "stdout", "stderr")}
        if stdin is not None:
            Path(paths["stdin"]).write_bytes(stdin)
        reply = _ZYGOTE.run({
            "args": list(args), "env": cli_env(home), "cwd": str(home), "stdin": paths["stdin"] if stdin is not None else None,
            "stdout": paths["stdout"], "stderr": paths["stderr"], "timeout": timeout,
        })
        out = Path(paths["stdout"]).read_bytes().decode("utf-8", "replace")
        err = Path(paths["stderr"]).read_bytes().decode("utf-8", "replace")
    command = ["hermes-state", *args]
    if reply.get("timed_out"):
        raise subprocess.TimeoutExpired(command, timeout, out, err)
    return subprocess.CompletedProcess(command, reply["code"], out, err)


# VmHWM is this process's own peak; getrusage's ru_maxrss would carry over the forking
# process's peak across exec on Linux.
PEAK_RSS = """
import sys
from hermes_state.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
sys.stderr.write(f"peak_rss_kib={peak}\\n")
raise SystemExit(code)
"""


def run_measured(home: Path, *args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run the command in a subprocess that reports its own peak RSS; returns the process and the peak (KiB)."""
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, *args], capture_output=True, text=True,
                          env=cli_env(home), timeout=timeout, cwd=str(home))
    marker = [line for line in done.stderr.splitlines() if line.startswith("peak_rss_kib=")]
    assert marker, done.stderr
    return done, int(marker[-1].split("=", 1)[1])


def run_json(home: Path, *args: str) -> Any:
    done = run_cli(home, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a failed run: exactly one line, no traceback."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


async def build_store(path: Path) -> dict[str, Any]:
    """Sessions covering what the commands show: tool calls, usage, archive, pin, a child, several sources."""
    db = SessionDB(path)
    try:
        await db.create_session("deploy-1", source="cli", model="m1", system_prompt="be brief")
        await db.append_message("deploy-1", "user", "Why did the docker compose deployment fail?")
        await db.append_message(
            "deploy-1", "assistant", None,
            tool_calls=[{"id": "call_7", "type": "function",
                         "function": {"name": "terminal", "arguments": json.dumps({"command": "docker compose logs", "tail": 50})}}],
        )
        await db.append_message("deploy-1", "tool", "volume 'data' not found", tool_call_id="call_7", tool_name="terminal")
        await db.append_message("deploy-1", "assistant", "The compose file references a missing volume.")
        await db.update_token_counts("deploy-1", input_tokens=1500, output_tokens=420, model="m1", api_call_count=3)
        await db.set_session_title("deploy-1", "Compose outage")
        await db.end_session("deploy-1", "done")
        await db.create_session("chat-2", source="telegram", model="m2")
        await db.append_message("chat-2", "user", [{"type": "text", "text": "what is in this picture"},
                                                   {"type": "image_url", "image_url": {"url": "http://x/y.png"}}])
        await db.append_message("chat-2", "assistant", "A cat on a keyboard.")
        await db.create_session("child-3", source="cli", parent_session_id="deploy-1")
        await db.append_message("child-3", "user", "follow up on the volume")
        await db.create_session("old-4", source="cli")
        await db.append_message("old-4", "user", "ancient history")
        await db.set_session_archived("old-4", True)
        await db.create_session("pin-5", source="cli")
        await db.append_message("pin-5", "user", "keep this one around")
        await db.set_session_pinned("pin-5", True)
        return {"sessions": 5, "messages": await db.message_count()}
    finally:
        await db.close()


async def fill_store(path: Path, sessions: int, per_session: int, *, prefix: str = "s", text_size: int = 60) -> int:
    """``sessions`` x ``per_session`` messages written in batches; returns the message total."""
    db = SessionDB(path)
    filler = "lorem ipsum dolor sit amet " * (text_size // 27 + 1)
    try:
        for s in range(sessions):
            session_id = f"{prefix}{s:05d}"
            await db.create_session(session_id, source="bulk")
            rows = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{session_id} message {i} {filler[:text_size]}"}
                    for i in range(per_session)]
            for start in range(0, per_session, 2000):
                await db.append_messages_batch(session_id, rows[start:start + 2000])
        return await db.message_count()
    finally:
        await db.close()
