"""``copy --to URL`` / ``copy --from URL``: move a whole store between SQLite and PostgreSQL.

Sessions go over in bounded ``import_sessions`` batches (see
:mod:`hermes_state.cli.transport`), parents first. A second run after an
interruption skips what arrived and completes partly copied sessions. A
verification pass then compares every source session's message count and
content digest with the destination; any difference exits non-zero.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from .errors import MISMATCH, OK, CliError
from .output import print_json, progress
from .argtypes import non_negative
from .sessions import iter_messages
from .target import Target, open_store, parse_target
from .transport import Budget, SessionWriter, digest_messages, session_ids

__all__ = ["add_parser", "verify"]


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add(
        "copy",
        "copy every session between the --db store and another one (SQLite file or PostgreSQL URL), "
        "then verify message counts and content digests; a re-run resumes an interrupted copy",
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


async def _session_digest(db: Any, session_id: str) -> tuple[int, str] | None:
    if await db.get_session(session_id) is None:
        return None
    digest = None
    count = 0
    async for page in iter_messages(db, session_id):
        digest = digest_messages(page, digest)
        count += len(page)
    return count, (digest_messages([]) if digest is None else digest).hexdigest()


async def verify(source: Any, destination: Any, ids: list[str]) -> list[dict[str, Any]]:
    """Compare each session's active message count and digest in both stores; returns the differences."""
    problems: list[dict[str, Any]] = []
    bar = progress(len(ids), "verify")
    try:
        for session_id in ids:
            want = await _session_digest(source, session_id)
            if want is None:  # deleted from the source meanwhile
                bar.update()
                continue
            have = await _session_digest(destination, session_id)
            if have is None:
                problems.append({"session_id": session_id, "problem": "missing from the destination"})
            elif have[0] != want[0]:
                problems.append({"session_id": session_id,
                                 "problem": f"{have[0]} messages in the destination, {want[0]} in the source"})
            elif have[1] != want[1]:
                problems.append({"session_id": session_id, "problem": "message content differs"})
            bar.update()
    finally:
        bar.close()
    return problems


async def _copy_session(source: Any, writer: SessionWriter, session_id: str) -> None:
    """Queue one session; one larger than a batch streams its messages page by page."""
    session = await source.get_session(session_id)
    if session is None:  # deleted from the source meanwhile
        return
    page = writer.budget.messages
    if (session.get("message_count") or 0) > page:
        await writer.add_paged(session, iter_messages(source, session_id, page=page), session_id)
        return
    session["messages"] = [m async for rows in iter_messages(source, session_id) for m in rows]
    await writer.add(session, session_id)


def _same_store(a: Target, b: Target) -> bool:
    if a.path is not None and b.path is not None:
        return a.path.resolve() == b.path.resolve()
    return a.url is not None and a.url == b.url


async def run_copy(args: argparse.Namespace) -> int:
    here: Target = args.target
    there = parse_target(args.to if args.to is not None else args.source)
    source_target, destination_target = (here, there) if args.to is not None else (there, here)
    if _same_store(source_target, destination_target):
        raise CliError("source and destination are the same store")
    budget = Budget(sessions=args.batch_sessions, messages=args.batch_messages)
    async with open_store(source_target, read_only=True) as source:
        ids = await session_ids(source)
        async with open_store(destination_target, read_only=args.verify_only) as destination:
            report: dict[str, Any] = {"source": str(source_target), "destination": str(destination_target),
                                      "sessions": len(ids)}
            if not args.verify_only:
                writer = SessionWriter(destination, budget)
                bar = progress(len(ids), "copy")
                try:
                    for session_id in ids:
                        await _copy_session(source, writer, session_id)
                        bar.update()
                    await writer.flush()
                finally:
                    bar.close()
                report.update(writer.report.as_dict())
                report["writer"] = await destination.writer_stats()
            problems = await verify(source, destination, ids)
    report["verified"] = not problems
    report["mismatches"] = problems
    if args.json:
        print_json(report)
    else:
        if not args.verify_only:
            print(f"copied {report['imported']} session(s) from {report['source']} to {report['destination']}; "
                  f"{report['skipped']} were already there, {report['appended_messages']} message(s) appended")
        if problems:
            for problem in problems[:20]:
                print(f"MISMATCH {problem['session_id']}: {problem['problem']}")
            print(f"verification failed: {len(problems)} of {len(ids)} session(s) differ")
        else:
            print(f"verified {len(ids)} session(s): message counts and content digests match")
    return MISMATCH if problems else OK
