"""``export`` and ``import``: sessions as JSON Lines, streamed, in and out of a store."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

import msgspec

from ..private_files import replaced_atomically
from .errors import FAILURE, NOT_FOUND, OK, USAGE, CliError
from .output import print_json, progress
from .argtypes import non_negative
from .sessions import iter_messages
from .target import open_store
from .transport import Budget, SessionWriter, parents_first, session_ids

__all__ = ["add_parsers"]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    export = add("export", "write sessions with their messages as JSON Lines (one session per line), streamed")
    export.add_argument("session_ids", metavar="ID", nargs="*", help="sessions to export (default: all)")
    export.add_argument("--source", help="only sessions from this source")
    export.add_argument("-o", "--output", default="-", help="file to write (default: standard output)")
    export.set_defaults(run=run_export)

    load = add("import", "read sessions from JSON Lines or the JSON the API exports; validated before writing")
    load.add_argument("input", metavar="FILE", help="file to read, - for standard input")
    load.add_argument("--batch-sessions", type=non_negative, default=Budget.sessions,
                      help=f"sessions per transaction (default {Budget.sessions})")
    load.add_argument("--batch-messages", type=non_negative, default=Budget.messages,
                      help=f"messages per transaction (default {Budget.messages})")
    load.set_defaults(run=run_import)


# ------------------------------------------------------------------ export


async def _write_session(db: Any, session: dict[str, Any], out: IO[bytes]) -> int:
    """Write one session line, its messages page by page; returns how many messages."""
    out.write(_encode(session)[:-1] + b',"messages":[')
    count = 0
    async for page in iter_messages(db, session["id"]):
        out.write((b"," if count else b"") + b",".join(_encode(m) for m in page))
        count += len(page)
    out.write(b"]}\n")
    return count


async def _export(db: Any, args: argparse.Namespace, out: IO[bytes]) -> dict[str, Any]:
    ids = list(dict.fromkeys(args.session_ids)) if args.session_ids else await session_ids(db, args.source)
    missing: list[str] = []
    sessions = messages = 0
    bar = progress(len(ids), "export")
    try:
        for session_id in ids:
            session = await db.get_session(session_id)
            if session is None:
                missing.append(session_id)
            else:
                messages += await _write_session(db, session, out)
                sessions += 1
            bar.update()
    finally:
        bar.close()
    return {"sessions": sessions, "messages": messages, "not_found": missing}


async def run_export(args: argparse.Namespace) -> int:
    if args.session_ids and args.source is not None:
        raise CliError("give session ids or --source, not both", USAGE)
    async with open_store(args.target, read_only=True) as db:
        if args.output == "-":
            report = await _export(db, args, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            target = Path(args.output)
            if target.is_dir():
                raise CliError(f"{target} is a directory")
            with replaced_atomically(target, private=False, tag="partial") as out:
                report = await _export(db, args, out)
    summary = f"exported {report['sessions']} session(s), {report['messages']} message(s)"
    if args.output != "-":
        if args.json:
            print_json({**report, "output": args.output})
        else:
            print(f"{summary} to {args.output}")
    else:
        print(summary, file=sys.stderr)
    for session_id in report["not_found"]:
        print(f"hermes-state: no session {session_id}", file=sys.stderr)
    return NOT_FOUND if report["not_found"] else OK


# ------------------------------------------------------------------ import


class _Entry(msgspec.Struct):
    """What the validation pass keeps per session: where it is, and its parent for ordering."""

    label: str
    offset: int
    length: int
    parent: str | None


def _check_session(value: Any, label: str) -> str | None:
    """The shape the import needs before any write: an object with an id and a list of messages."""
    if not isinstance(value, dict):
        return f"{label}: expected a session object, got {type(value).__name__}"
    if not isinstance(value.get("id"), str) or not value["id"].strip():
        return f"{label}: session id is required (a non-empty string)"
    if not isinstance(value.get("messages", []), (list, type(None))):
        return f"{label}: messages must be a list"
    return None


def _scan_lines(handle: IO[bytes]) -> tuple[dict[str, _Entry], list[str]]:
    """Validation pass over JSON Lines: every line parses and has the needed shape; keeps offsets only."""
    entries: dict[str, _Entry] = {}
    problems: list[str] = []
    offset = 0
    for number, line in enumerate(handle, start=1):
        length = len(line)
        if line.strip():
            label = f"line {number}"
            try:
                value = _decode(line)
            except msgspec.DecodeError as exc:
                problems.append(f"{label}: not valid JSON ({exc})")
            else:
                problem = _check_session(value, label)
                if problem is None and value["id"] in entries:
                    problem = f"{label}: session id {value['id']!r} also on {entries[value['id']].label}"
                if problem is not None:
                    problems.append(problem)
                else:
                    parent = value.get("parent_session_id")
                    entries[value["id"]] = _Entry(label, offset, length, parent if isinstance(parent, str) else None)
        offset += length
    return entries, problems


def _looks_like_lines(handle: IO[bytes]) -> bool:
    """JSON Lines unless the file is one JSON array, or one object spread over several lines."""
    head = handle.read(64 * 1024).lstrip()
    handle.seek(0)
    if head.startswith(b"["):
        return False
    first = handle.readline()
    handle.seek(0)
    try:
        _decode(first)
    except msgspec.DecodeError:
        return False
    return True


def _spool_stdin() -> IO[bytes]:
    spool = tempfile.TemporaryFile()
    shutil.copyfileobj(sys.stdin.buffer, spool)
    spool.seek(0)
    return spool


async def _import_lines(db: Any, handle: IO[bytes], entries: dict[str, _Entry], writer: SessionWriter) -> None:
    order = parents_first([(session_id, entry.parent) for session_id, entry in entries.items()])
    bar = progress(len(order), "import")
    try:
        for session_id in order:
            entry = entries[session_id]
            handle.seek(entry.offset)
            await writer.add(_decode(handle.read(entry.length)), entry.label)
            bar.update()
        await writer.flush()
    finally:
        bar.close()


async def _import_document(db: Any, document: Any, writer: SessionWriter) -> None:
    sessions = document if isinstance(document, list) else [document]
    problems = [p for i, s in enumerate(sessions) if (p := _check_session(s, f"entry {i}")) is not None]
    if problems:
        raise CliError("nothing imported: " + "; ".join(problems[:3]))
    by_id = {s["id"]: (i, s) for i, s in enumerate(sessions)}
    order = parents_first([(s["id"], s.get("parent_session_id")) for s in sessions])
    bar = progress(len(order), "import")
    try:
        for session_id in order:
            index, session = by_id[session_id]
            await writer.add(session, f"entry {index}")
            bar.update()
        await writer.flush()
    finally:
        bar.close()


async def run_import(args: argparse.Namespace) -> int:
    budget = Budget(sessions=args.batch_sessions, messages=args.batch_messages)
    store = open_store(args.target, read_only=False)  # checks --db before the input is read
    if args.input == "-":
        handle: IO[bytes] = _spool_stdin()
    else:
        path = Path(args.input)
        if path.is_dir():
            raise CliError(f"{path} is a directory")
        if not path.exists():
            raise CliError(f"no file {path}", NOT_FOUND)
        handle = open(path, "rb")
    with handle:
        lines = _looks_like_lines(handle)
        if lines:
            entries, problems = _scan_lines(handle)
            if problems:
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                raise CliError("nothing imported: " + "; ".join(problems[:3]) + more)
            document: Any = None
        else:
            try:
                document = _decode(handle.read())
            except msgspec.DecodeError as exc:
                raise CliError(f"nothing imported: not JSON Lines and not a JSON document ({exc})") from None
        async with store as db:
            writer = SessionWriter(db, budget)
            try:
                if lines:
                    await _import_lines(db, handle, entries, writer)
                else:
                    await _import_document(db, document, writer)
            finally:
                report = {**writer.report.as_dict(), "writer": await db.writer_stats()}
    if args.json:
        print_json(report)
    else:
        print(f"imported {report['imported']} session(s), skipped {report['skipped']} already present, "
              f"{report['detached']} without their parent; {report['appended_messages']} message(s) appended "
              "to large or partly imported sessions")
    return FAILURE if report["errors"] else OK
