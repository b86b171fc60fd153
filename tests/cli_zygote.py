"""A fork server for the command-line tests: ``python -m tests.cli_zygote``.

Starting ``python -m hermes_state`` costs about half a second of CPU, nearly all
of it the interpreter and the imports, and the command tests run it over a
hundred times. This process imports the package once, then forks one child per
request: each child is a fresh process (its own pid, signals, environment,
working directory, standard streams, module state as after the imports) that
runs exactly what the ``hermes-state`` script runs (``hermes_state.cli.entry``).

Protocol, one JSON line each way on stdin/stdout:
``{"args": [...], "env": {...}, "cwd": "...", "stdin": path|null, "stdout": path,
"stderr": path, "timeout": seconds}`` -> ``{"code": exit status}`` (``-9`` and
``"timed_out": true`` when the child was killed at its timeout).

The server stays single-threaded and never starts an event loop, so a fork
copies no lock held by another thread.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _warm_up() -> None:
    """Import what every command imports (not the drivers' choices: they read the child's environment)."""
    import asyncio  # noqa: F401
    import sqlite3  # noqa: F401

    import aiosqlite  # noqa: F401
    import msgspec  # noqa: F401
    import yaml  # noqa: F401

    import hermes_state.cli
    import hermes_state.store  # noqa: F401

    hermes_state.cli.build_parser()
    try:
        import asyncpg  # noqa: F401

        import hermes_state.postgres  # noqa: F401
    except ImportError:
        pass


def _child(request: dict) -> None:
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = request.get("stdin") or os.devnull
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.argv = ["hermes-state", *request["args"]]
    code = 1
    try:
        from hermes_state.cli import entry

        entry()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported the way an uncaught error would be
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
    os._exit(code)


def _wait(pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"code": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"code": -9, "timed_out": True}
        time.sleep(0.002)


def main() -> None:
    _warm_up()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps(_wait(pid, float(request.get("timeout", 240)))), flush=True)


if __name__ == "__main__":
    main()
