"""``export`` and ``import``: a store's rows as a versioned JSON Lines file, streamed, out of and into a store.

``export`` writes format version 2 (:mod:`hermes_state.cli.export_format`,
``docs/export-format.md``): a header line, then every carried row in copy
order (:mod:`hermes_state.cli.rows`), then an end line. ``import`` reads
that, and also what earlier releases wrote (format 1: one session object
per line) and the JSON ``export_all``/``export_session`` return. Both stream:
memory holds one batch, never the file.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import IO, Any, Callable, NamedTuple

from ..private_files import replaced_atomically
from ..tables import CARRIED_TABLES, COUNTER_COLUMNS, STORE_TABLES
from .argtypes import non_negative
from .errors import FAILURE, MISMATCH, NOT_FOUND, OK, USAGE, CliError
from .export_format import decode_row, encode_row, end_line, header_line, read_header
from .output import decode_json as _decode, print_json, progress
from .rows import PAGE, RowWriter, iter_messages, iter_pages, session_order
from .target import open_store
from .transport import Budget, SessionWriter, parents_first

__all__ = ["add_parsers"]

# The tables whose rows follow every message in a file.
_AFTER_MESSAGES = CARRIED_TABLES[CARRIED_TABLES.index("messages") + 1 :]


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    export = add("export", "write the store (or chosen sessions) as versioned JSON Lines, one stored row per line, "
                           "streamed; import reads it back into either backend")
    export.add_argument("session_ids", metavar="ID", nargs="*", help="sessions to export (default: all)")
    export.add_argument("--source", help="only sessions from this source")
    export.add_argument("-o", "--output", default="-", help="file to write (default: standard output)")
    export.set_defaults(run=run_export)

    load = add("import", "read an export (any format version this release knows) or the JSON the API exports; "
                         "validated before writing, resumable")
    load.add_argument("input", metavar="FILE", help="file to read, - for standard input")
    load.add_argument("--batch-sessions", type=non_negative, default=Budget.sessions,
                      help=f"sessions per transaction (default {Budget.sessions})")
    load.add_argument("--batch-messages", type=non_negative, default=Budget.messages,
                      help=f"messages per transaction (default {Budget.messages})")
    load.set_defaults(run=run_import)


# ------------------------------------------------------------------ export


class _Exporter:
    """Writes the lines of one export and counts them per table."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.counts: dict[str, int] = {}

    def rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.out.write(b"".join(encode_row(table, row) for row in rows))
        self.counts[table] = self.counts.get(table, 0) + len(rows)

    async def messages(self, db: Any, session_id: str) -> None:
        async for page in iter_messages(db, session_id):
            self.rows("messages", [{k: v for k, v in row.items() if k != "id"} for row in page])


async def _chosen_sessions(db: Any, args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(session ids to export, parents first; requested ids the store does not have)."""
    if not args.session_ids and args.source is None:
        return await session_order(db), []
    wanted = list(dict.fromkeys(args.session_ids))
    ids = await session_order(db, ids=set(wanted) if wanted else None, source=args.source)
    found = set(ids)
    return ids, [i for i in wanted if i not in found]


async def _export(db: Any, args: argparse.Namespace, out: IO[bytes]) -> dict[str, Any]:
    info = await db.storage_info()
    whole = not args.session_ids and args.source is None
    out.write(header_line(info.get("schema_version"), str(info.get("backend", "sqlite")), "store" if whole else "sessions"))
    lines = _Exporter(out)
    ids, missing = await _chosen_sessions(db, args)
    if whole:
        for table in STORE_TABLES:
            async for page in iter_pages(db, table):
                lines.rows(table, page)
    else:  # the prompts the chosen sessions name, before the sessions
        hashes: set[str] = set()
        for start in range(0, len(ids), PAGE):
            rows = await db.find_rows("sessions", ids[start : start + PAGE])
            hashes.update(row["system_prompt_hash"] for row in rows if row.get("system_prompt_hash"))
        prompts = sorted(hashes)
        for start in range(0, len(prompts), PAGE):
            lines.rows("system_prompts", await db.find_rows("system_prompts", prompts[start : start + PAGE]))
    for start in range(0, len(ids), PAGE):
        chunk = ids[start : start + PAGE]
        by_id = {row["id"]: row for row in await db.find_rows("sessions", chunk)}
        lines.rows("sessions", [by_id[i] for i in chunk if i in by_id])
    bar = progress(len(ids), "export")
    try:
        for session_id in ids:
            await lines.messages(db, session_id)
            bar.update()
    finally:
        bar.close()
    if whole:
        async for page in iter_pages(db, "session_model_usage"):
            lines.rows("session_model_usage", page)
    else:
        for session_id in ids:
            async for page in iter_pages(db, "session_model_usage", session_id=session_id):
                lines.rows("session_model_usage", page)
    out.write(end_line(lines.counts))
    return {"sessions": lines.counts.get("sessions", 0), "messages": lines.counts.get("messages", 0),
            "rows": lines.counts, "not_found": missing}


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
            with replaced_atomically(target, tag="partial") as out:  # conversations: 0600 whatever the umask
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


class _Entry(NamedTuple):
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
    import msgspec

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
    import msgspec

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
    import tempfile

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


def _scan_rows(handle: IO[bytes]) -> list[str]:
    """Validation pass over a version-2 file (after its header): every line decodes, names a carried table, ends it."""
    problems: list[str] = []
    counts: dict[str, int] = {}
    end: dict[str, Any] | None = None
    for number, line in enumerate(handle, start=2):
        if not line.strip():
            continue
        label = f"line {number}"
        if end is not None:
            problems.append(f"{label}: a row after the end line")
            break
        try:
            decoded = decode_row(line, label)
        except ValueError as exc:
            problems.append(str(exc))
        else:
            if isinstance(decoded, dict):
                end = decoded
                continue
            table, row = decoded
            if table not in CARRIED_TABLES:
                problems.append(f"{label}: unknown table {table!r}")
            elif table == "messages" and not isinstance(row.get("session_id"), str):
                problems.append(f"{label}: a message row needs its session_id")
            counts[table] = counts.get(table, 0) + 1
        if len(problems) > 3:
            break
    if not problems:
        if end is None:
            problems.append("the file has no end line: it was cut off (export again, or use the complete file)")
        elif not isinstance(end.get("rows"), dict):
            problems.append("the end line has no row counts")
        elif {t: n for t, n in end["rows"].items() if n} != counts:
            problems.append(f"the end line counts {end.get('rows')} rows, the file holds {counts}")
    return problems


async def _import_rows(handle: IO[bytes], writer: RowWriter) -> None:
    """Second pass: every row into the store, a session's messages in runs (their positions counted here).

    A session's counters are set to the file's values when its messages end
    (the next session's begin, or the messages are over); sessions with no
    message line get theirs once the messages are over.
    """
    positions: dict[str, int] = {}
    counters: dict[str, dict[str, Any]] = {}  # session -> its counters in the file
    run: list[dict[str, Any]] = []
    run_session: str | None = None
    messages_over = False

    async def flush_run() -> None:
        nonlocal run
        if run_session is not None and run:
            start = positions.get(run_session, 0)
            positions[run_session] = start + len(run)
            await writer.add_messages(run_session, run, start)
        run = []

    async def end_run() -> None:
        await flush_run()
        if run_session is not None and run_session in counters:
            await writer.finish_session(run_session, counters[run_session])

    async def end_messages() -> None:
        nonlocal messages_over
        await end_run()
        for session_id, values in counters.items():
            if session_id not in positions:
                await writer.finish_session(session_id, values)
        messages_over = True

    bar = progress(None, "import", unit="row")
    number = 1
    try:
        for number, line in enumerate(handle, start=2):
            if not line.strip():
                continue
            decoded = decode_row(line, f"line {number}")
            if isinstance(decoded, dict):
                break
            table, row = decoded
            if table == "messages":
                if row["session_id"] != run_session:
                    await end_run()
                    run_session = row["session_id"]
                elif len(run) >= PAGE:
                    await flush_run()
                run.append(row)
            else:
                if table in _AFTER_MESSAGES and not messages_over:
                    await end_messages()
                else:
                    await flush_run()
                await writer.add_row(table, row)
                if table == "sessions" and isinstance(row.get("id"), str):
                    counters[row["id"]] = {name: row[name] for name in COUNTER_COLUMNS if name in row}
            bar.update()
        if not messages_over:
            await end_messages()
        await writer.flush()
    except (TypeError, ValueError) as exc:  # a value the store cannot keep unchanged: say where the batch ended
        raise CliError(f"import stopped at a batch ending by line {number} (what came before is in): {exc}") from None
    finally:
        bar.close()


async def _run_import_rows(args: argparse.Namespace, store: Any, handle: IO[bytes], header: dict[str, Any]) -> int:
    handle.readline()  # the header
    problems = _scan_rows(handle)
    if problems:
        more = " (and more)" if len(problems) > 3 else ""
        raise CliError("nothing imported: " + "; ".join(problems[:3]) + more)
    handle.seek(0)
    handle.readline()  # the header
    budget = Budget(sessions=args.batch_sessions, messages=args.batch_messages)
    async with store as db:
        writer = RowWriter(db, budget)
        try:
            await _import_rows(handle, writer)
        finally:
            report = {"format_version": header["format_version"], "schema_version": header.get("schema_version"),
                      **writer.report.as_dict(), "writer": await db.writer_stats()}
    if args.json:
        print_json(report)
    else:
        inserted = report["inserted"]
        others = ", ".join(f"{n} {t}" for t, n in inserted.items() if t not in ("sessions", "messages"))
        print(f"imported {report['imported']} session(s), {inserted.get('messages', 0)} message(s)"
              f"{f' and {others} row(s)' if others else ''}; already there: {report['skipped']} session(s)")
        for item in report["conflicts"][:20]:
            print(f"CONFLICT {item['table']} {'/'.join(map(str, item['key']))}: {item['problem']}")
        if report["detached"]:
            print(f"{len(report['detached'])} session(s) imported without their parent (it is not in the file or the store)")
    return MISMATCH if report["conflict_count"] else OK


async def run_import(args: argparse.Namespace) -> int:
    import msgspec

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
        header = read_header(handle.readline())
        handle.seek(0)
        if header is not None:
            return await _run_import_rows(args, store, handle, header)
        lines = _looks_like_lines(handle)  # format 1, or the API's JSON
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
