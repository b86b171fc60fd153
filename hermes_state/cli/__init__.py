"""The hermes-state command: inspect, search, export and import, check and copy a session store.

Every command goes through the public SessionDB API, so it behaves the same on
a SQLite file and on a PostgreSQL database.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import sys
from typing import Any, Sequence

from .. import __version__
from . import inspect, quickstart, search, serve, sessions, transfer
from . import copy as copy_command
from . import verify as verify_command
from .errors import EXIT_CODES_HELP, FAILURE, OK, CliError
from .target import Target, parse_target, redact

__all__ = ["main", "build_parser"]

DB_HELP = "database: a file path (default $HERMES_HOME/state.db) or a postgresql://user@host/db URL"


def _add_globals(parser: argparse.ArgumentParser, *, top: bool) -> None:
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


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Plain text help that keeps the exit-code table's line breaks."""


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the whole command (sub-commands included)."""
    parser = argparse.ArgumentParser(
        prog="hermes-state", description=__doc__, epilog=EXIT_CODES_HELP, formatter_class=_Formatter
    )
    parser.add_argument("--version", action="version", version=f"hermes-state {__version__}")
    _add_globals(parser, top=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_globals(common, top=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, into: Any = sub) -> argparse.ArgumentParser:
        return into.add_parser(  # type: ignore[no-any-return]
            name, help=help_text, description=help_text, parents=[common],
            epilog=EXIT_CODES_HELP, formatter_class=_Formatter,
        )

    quickstart.add_parser(add)
    inspect.add_parsers(add)
    sessions.add_parsers(add)
    search.add_parser(add)
    transfer.add_parsers(add)
    copy_command.add_parser(add)
    serve.add_parser(add)
    verify_command.add_parser(add)
    return parser


def _network_cause(exc: BaseException) -> BaseException | None:
    """The connection failure (refused, unreachable, timed out) behind ``exc``, if any; backends may wrap it."""
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
    """Run the command line; returns the process exit status (see ``--help`` for the codes)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors and 0 for --help/--version
        return int(exc.code or 0)
    # The result or one error line is the output; library log lines only on request.
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL + 1, stream=sys.stderr,
                        format="hermes-state: %(name)s: %(message)s")
    target: Target | None = None
    try:
        target = parse_target(args.db)
        args.target = target
        code = asyncio.run(args.run(args))
        return OK if code is None else int(code)
    except CliError as exc:
        print(f"hermes-state: {redact(str(exc))}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("hermes-state: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return OK
    except Exception as exc:  # a command prints the problem, never a traceback
        print(f"hermes-state: {redact(_describe(exc, target))}", file=sys.stderr)
        return FAILURE

