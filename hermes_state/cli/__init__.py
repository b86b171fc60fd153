"""The hermes-state command: inspect, search, export and import, check and copy a session store.

Every command goes through the public SessionDB API, so it behaves the same on
a SQLite file and on a PostgreSQL database.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn, Sequence

# Start-up stays light so `--help` is quick and a signal during it is handled:
# this package imports only the signal guard here, the command modules when the
# parser is built, and the store, drivers and asyncio when a command runs.
from .interrupts import Interrupted, SignalGuard

if TYPE_CHECKING:
    import argparse

    from .target import Target

__all__ = ["main", "entry", "build_parser", "COMMAND_MODULES"]

DB_HELP = "database: a file path (default $HERMES_HOME/state.db) or a postgresql://user@host/db URL"

# The modules of this package that define commands, in the order of --help. Each has
# add_parser(add) or add_parsers(add) and must stay light to import (see docs/layout.md).
COMMAND_MODULES = ("quickstart", "inspect", "sessions", "search", "transfer", "copy", "verify", "serve")


def _add_globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
    import argparse

    # Sub-parsers leave the value alone unless the option is given after the
    # subcommand, so "--db X info" and "info --db X" mean the same thing.
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument("--db", default=default, metavar="PATH_OR_URL", help=DB_HELP)
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON instead of text",
    )
    parser.add_argument(
        "--verbose", action="store_true", default=False if top else argparse.SUPPRESS,
        help="also print the store's log messages (warnings and notices) on standard error",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the whole command (sub-commands included)."""
    import argparse

    from .. import __version__
    from .errors import EXIT_CODES_HELP

    formatter = argparse.RawDescriptionHelpFormatter  # keeps the exit-code table's line breaks
    parser = argparse.ArgumentParser(
        prog="hermes-state", description=__doc__, epilog=EXIT_CODES_HELP, formatter_class=formatter
    )
    parser.add_argument("--version", action="version", version=f"hermes-state {__version__}")
    _add_globals(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_globals(common, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, into: Any = sub) -> argparse.ArgumentParser:
        return into.add_parser(  # type: ignore[no-any-return]
            name, help=help_text, description=help_text, parents=[common],
            epilog=EXIT_CODES_HELP, formatter_class=formatter,
        )

    for name in COMMAND_MODULES:
        module = importlib.import_module(f".{name}", __name__)
        register = getattr(module, "add_parsers", None) or module.add_parser
        register(add)
    return parser


def _network_cause(exc: BaseException) -> BaseException | None:
    """The connection failure (refused, unreachable, timed out) behind ``exc``, if any; backends may wrap it."""
    import asyncio

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, TimeoutError, asyncio.TimeoutError)) or (
            isinstance(current, OSError) and not isinstance(current, (FileNotFoundError, PermissionError))
            and current.errno is not None and current.filename is None
        ):
            return current
        current = current.__cause__ or current.__context__
    return None


def _describe(exc: BaseException, target: Target | None) -> str:
    """One line for an unexpected failure; connection failures name the server's host and port."""
    import sqlite3

    text = str(exc) or type(exc).__name__
    if target is not None and target.is_postgres:
        if target.host_port in text:  # the backend already named the server
            return text
        network = _network_cause(exc)
        if network is not None:
            reason = getattr(network, "strerror", None) or str(network) or type(network).__name__
            return f"cannot connect to PostgreSQL at {target.host_port}: {reason}"
        if type(exc).__module__.startswith("asyncpg"):
            return f"PostgreSQL at {target.host_port}: {text}"
    if isinstance(exc, sqlite3.DatabaseError) and "file is not a database" in text and target is not None:
        return f"{target} is not a SQLite database ({text})"
    if isinstance(exc, PermissionError) and exc.filename:
        return f"permission denied: {exc.filename}"
    if isinstance(exc, (ValueError, TypeError, sqlite3.Error, OSError, RuntimeError)):
        return text
    return f"{type(exc).__name__}: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status (see ``--help`` for the codes).

    SIGINT and SIGTERM end it with one line and 130 or 143 (see
    :mod:`hermes_state.cli.interrupts`); the previous handlers are back when it returns.
    """
    guard = SignalGuard().install()
    try:
        return _main(argv, guard, final=False)
    finally:
        guard.restore()


def entry() -> NoReturn:
    """The ``hermes-state`` script and ``python -m hermes_state``: run the command and exit with its status."""
    guard = SignalGuard().install()  # first, so even the imports below are covered
    sys.exit(_main(None, guard, final=True))


def _main(argv: Sequence[str] | None, guard: SignalGuard, *, final: bool) -> int:
    code = 1
    try:
        try:
            code = _command(argv, guard)
        finally:
            # Past this point a signal no longer unwinds anything: it is remembered
            # (main) or ends the process with its line and code (entry).
            guard.set_mode("exit" if final else "defer")
    except Interrupted:
        pass
    if guard.signum is not None:
        return guard.report()
    return code


def _command(argv: Sequence[str] | None, guard: SignalGuard) -> int:
    from .errors import FAILURE, OK, CliError
    from .target import parse_target, redact

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 for --help/--version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else FAILURE)
    import logging

    # The result or one error line is the output; library log lines only on request.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL + 1, stream=sys.stderr,
                        format="hermes-state: %(name)s: %(message)s")
    target: Target | None = None
    try:
        target = parse_target(args.db)
        args.target = target
        code = _run_command(args, guard)
        return OK if code is None else int(code)
    except CliError as exc:
        print(f"hermes-state: {redact(str(exc))}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:  # off the main thread no handler is installed: Python's own Ctrl-C
        print("hermes-state: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return OK
    except Exception as exc:  # a command prints the problem, never a traceback
        print(f"hermes-state: {redact(_describe(exc, target))}", file=sys.stderr)
        return FAILURE


def _run_command(args: argparse.Namespace, guard: SignalGuard) -> Any:
    """Run the command's coroutine; a signal cancels it, so its ``async with`` blocks close the stores."""
    import asyncio

    async def command() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        guard.set_mode("cancel", lambda: loop.call_soon_threadsafe(task.cancel))
        try:
            return await args.run(args)
        finally:
            guard.set_mode("defer")

    guard.set_mode("defer")
    try:
        return asyncio.run(command())
    except asyncio.CancelledError:
        if guard.signum is None:
            raise
        return None  # _main reports the signal
    finally:
        guard.set_mode("raise")
