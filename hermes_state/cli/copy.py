"""``copy --to URL`` / ``copy --from URL``: move a whole store between SQLite and PostgreSQL, then verify it.

Every table that holds user data goes over row by row through the row API
(:mod:`hermes_state.cli.rows`): the store-wide tables, the sessions
(parents first), each session's messages (archived, compacted and rewound
ones included, in order) and then its counters, the usage ledger. Batches
stay inside the ``--batch-*`` budget. Wherever a copy stops, the
destination's counters agree with its rows (``doctor`` finds nothing to
repair), and a second run skips what arrived and completes partly copied
sessions. Rows the destination already holds with other values are left
alone and reported. Then the whole of both stores is compared table by
table (:mod:`hermes_state.cli.verify`); rows only in the destination (it
held other sessions before) are counted, not a difference. Any difference
exits 4.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from ..tables import STORE_TABLES
from .argtypes import non_negative
from .errors import MISMATCH, OK, CliError
from .output import print_json, progress
from .rows import RowWriter, iter_messages, iter_pages, key_of, session_order
from .target import Target, open_store, parse_target, same_store
from .transport import Budget
from .verify import compare_stores, print_comparison

__all__ = ["add_parser", "copy_rows"]


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add(
        "copy",
        "copy every table that holds user data between the --db store and another one (SQLite file or "
        "PostgreSQL URL), then compare both stores row by row; a re-run resumes an interrupted copy",
    )
    way = parser.add_mutually_exclusive_group(required=True)
    way.add_argument("--to", metavar="PATH_OR_URL", help="copy from --db into this store")
    way.add_argument("--from", dest="source", metavar="PATH_OR_URL", help="copy from this store into --db")
    parser.add_argument("--batch-sessions", type=non_negative, default=Budget.sessions,
                        help=f"sessions per transaction (default {Budget.sessions})")
    parser.add_argument("--batch-messages", type=non_negative, default=Budget.messages,
                        help=f"messages per transaction (default {Budget.messages})")
    parser.add_argument("--verify-only", action="store_true", help="compare the two stores, copy nothing")
    parser.set_defaults(run=run_copy)


async def copy_rows(source: Any, writer: RowWriter) -> int:
    """Write every carried row of ``source`` through ``writer``, in copy order; returns the number of sessions."""
    for table in STORE_TABLES:
        async for page in iter_pages(source, table):
            await writer.add_rows(table, page)
    ids = await session_order(source)
    bar = progress(len(ids), "copy")
    try:
        batch = writer.budget.sessions
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            rows = {key_of("sessions", row)[0]: row for row in await source.find_rows("sessions", chunk)}
            await writer.add_rows("sessions", [rows[i] for i in chunk if i in rows])  # gone meanwhile: skipped
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            rows = {row["id"]: row for row in await source.find_rows("sessions", chunk)}  # for their counters
            for session_id in chunk:
                if await writer.wants_messages(session_id, await source.message_count(session_id)):
                    position = 0
                    async for page in iter_messages(source, session_id, page=writer.budget.messages):
                        await writer.add_messages(session_id, page, position)
                        position += len(page)
                if session_id in rows:
                    await writer.finish_session(session_id, rows[session_id])
                bar.update()
        async for page in iter_pages(source, "session_model_usage"):
            await writer.add_rows("session_model_usage", page)
        await writer.flush()
    finally:
        bar.close()
    return len(ids)


def _summary(report: dict[str, Any]) -> str:
    inserted, skipped = report["inserted"], report["already_there"]
    line = (f"copied {inserted.get('sessions', 0)} session(s) and {inserted.get('messages', 0)} message(s) "
            f"from {report['source']} to {report['destination']}")
    others = {t: n for t, n in inserted.items() if t not in ("sessions", "messages")}
    if others:
        line += " (and " + ", ".join(f"{n} {t} row(s)" for t, n in others.items()) + ")"
    if skipped:
        line += f"; already there: {', '.join(f'{n} {t}' for t, n in skipped.items())}"
    return line


async def run_copy(args: argparse.Namespace) -> int:
    here: Target = args.target
    there = parse_target(args.to if args.to is not None else args.source)
    source_target, destination_target = (here, there) if args.to is not None else (there, here)
    if same_store(source_target, destination_target):
        raise CliError("source and destination are the same store")
    budget = Budget(sessions=args.batch_sessions, messages=args.batch_messages)
    report: dict[str, Any] = {"source": str(source_target), "destination": str(destination_target)}
    async with open_store(source_target, read_only=True) as source:
        async with open_store(destination_target, read_only=args.verify_only) as destination:
            if not args.verify_only:
                writer = RowWriter(destination, budget)
                report["sessions"] = await copy_rows(source, writer)
                report.update(writer.report.as_dict())
                report["writer"] = await destination.writer_stats()
            found = await compare_stores(source, destination, allow_extra=True)
    report.update(found.as_dict())
    conflicts = report.get("conflict_count", 0)
    if args.json:
        print_json(report)
    else:
        if not args.verify_only:
            print(_summary(report))
            for item in report["conflicts"][:20]:
                print(f"CONFLICT {item['table']} {'/'.join(map(str, item['key']))}: {item['problem']}")
            if report["detached"]:
                print(f"{len(report['detached'])} session(s) copied without their parent (it is not in the source)")
        print_comparison(found, source=str(source_target), target=str(destination_target))
    return MISMATCH if found.count or conflicts else OK
