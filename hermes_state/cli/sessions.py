"""``sessions list|show|delete|prune``: find, read and remove conversations."""

from __future__ import annotations

import argparse
from operator import itemgetter
from typing import Any, AsyncIterator, Callable

from .argtypes import days, non_negative, parse_since
from .errors import NOT_FOUND, OK, CliError
from .output import print_json, progress, when
from .render import content_text, one_line, tool_call_text
from .rows import paged
from .target import open_store

__all__ = ["add_parsers", "iter_messages"]

MESSAGE_PAGE = 1000
LIST_PAGE = 200


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    group = add("sessions", "list, show, delete and prune sessions")
    inner = group.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")

    def add_inner(name: str, help_text: str) -> argparse.ArgumentParser:
        return add(name, help_text, inner)

    listing = add_inner("list", "list sessions, most recently active first")
    listing.add_argument("--source", help="only sessions from this source (cli, telegram, ...)")
    listing.add_argument("--since", type=parse_since, help="active since: 7d, 12h, 30m, or a date like 2026-01-31")
    listing.add_argument("--match", help="title or id contains this text (case-insensitive)")
    archived = listing.add_mutually_exclusive_group()
    archived.add_argument("--archived", action="store_true", help="only archived sessions")
    archived.add_argument("--all", action="store_true", help="archived sessions too")
    listing.add_argument("--pinned", action="store_true", help="only pinned sessions")
    listing.add_argument("--limit", type=non_negative, default=20, help="page size (default 20)")
    listing.add_argument("--offset", type=non_negative, default=0, help="skip this many matching sessions")
    listing.set_defaults(run=run_list)

    show = add_inner("show", "print a session's transcript: roles, tool calls, results, times and token usage")
    show.add_argument("session_id", metavar="ID", help="session id (a unique prefix works)")
    show.set_defaults(run=run_show)

    delete = add_inner("delete", "delete sessions with their messages (delegate sub-sessions too)")
    delete.add_argument("session_ids", metavar="ID", nargs="+", help="exact session ids")
    delete.set_defaults(run=run_delete)

    prune = add_inner("prune", "delete ended sessions with no activity for a number of days")
    prune.add_argument("--older-than", type=days, required=True, metavar="DAYS", help="days without activity")
    prune.add_argument("--source", help="only sessions from this source")
    prune.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    prune.set_defaults(run=run_prune)


def _wanted(row: dict[str, Any], args: argparse.Namespace) -> bool:
    if args.pinned and not row.get("pinned"):
        return False
    return args.since is None or (row.get("last_active") or 0) >= args.since


async def _list_rows(db: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One page of matching rows; ``--since`` and ``--pinned`` filter pages of the API's activity order."""
    rows: list[dict[str, Any]] = []
    skip = args.offset
    offset = 0
    while len(rows) < args.limit:
        page = await db.list_sessions_rich(
            source=args.source, limit=LIST_PAGE, offset=offset, order_by_last_active=True,
            search_query=args.match, include_archived=args.all or args.archived,
            archived_only=args.archived, compact_rows=True,
        )
        for row in page:
            if not _wanted(row, args):
                continue
            if skip:
                skip -= 1
                continue
            rows.append(row)
            if len(rows) == args.limit:
                break
        oldest = page[-1].get("last_active") if page else None
        if len(page) < LIST_PAGE or (args.since is not None and (oldest or 0) < args.since):
            break
        offset += LIST_PAGE
    return rows


async def run_list(args: argparse.Namespace) -> int:
    async with open_store(args.target, read_only=True) as db:
        rows = await _list_rows(db, args) if args.limit else []
    if args.json:
        print_json(rows)
        return OK
    if not rows:
        print("no sessions match")
        return OK
    for row in rows:
        flags = ("A" if row.get("archived") else "-") + ("P" if row.get("pinned") else "-")
        label = row.get("title") or row.get("preview") or ""
        print(f"{row['id']:<28} {when(row.get('last_active'))}  {flags} {str(row.get('source') or '-'):<10} "
              f"{row.get('message_count') or 0:>6} msgs  {one_line(str(label), 50)}")
    return OK


def iter_messages(db: Any, session_id: str, page: int = MESSAGE_PAGE) -> AsyncIterator[list[dict[str, Any]]]:
    """A session's active messages in id order, ``page`` rows at a time (memory stays flat)."""
    return paged(lambda after: db.get_messages(session_id, limit=page, after_id=after), itemgetter("id"), page)


async def _resolve(db: Any, session_id: str) -> str:
    resolved = await db.resolve_session_id(session_id)
    if resolved is None:
        raise CliError(f"no session {session_id!r} (or the prefix matches several)", NOT_FOUND)
    return str(resolved)


def _usage_line(session: dict[str, Any]) -> str:
    tokens = [f"{session.get(key) or 0} {label}" for key, label in (
        ("input_tokens", "in"), ("output_tokens", "out"), ("cache_read_tokens", "cache read"),
        ("cache_write_tokens", "cache write"), ("reasoning_tokens", "reasoning"))]
    cost = session.get("actual_cost_usd") or session.get("estimated_cost_usd")
    return "tokens: " + ", ".join(tokens) + (f"; cost ${cost:.4f}" if cost else "") + \
        f"; {session.get('api_call_count') or 0} API calls"


def _print_message(message: dict[str, Any]) -> None:
    role = message.get("role") or "?"
    head = f"[{when(message.get('timestamp'))}] {role}"
    if role == "tool":
        head += f" {message.get('tool_name') or ''} (call {message.get('tool_call_id') or '?'})".rstrip()
    if message.get("token_count"):
        head += f"  [{message['token_count']} tokens]"
    print(head)
    text = content_text(message.get("content"))
    for line in text.splitlines():
        print(f"    {line}")
    for call in message.get("tool_calls") or []:
        call_id = call.get("id") if isinstance(call, dict) else None
        print(f"    -> {tool_call_text(call)}" + (f"  (call {call_id})" if call_id else ""))


async def run_show(args: argparse.Namespace) -> int:
    async with open_store(args.target, read_only=True) as db:
        session_id = await _resolve(db, args.session_id)
        session = await db.get_session(session_id)
        if session is None:
            raise CliError(f"no session {session_id!r}", NOT_FOUND)
        if args.json:
            messages = [m async for page in iter_messages(db, session_id) for m in page]
            print_json({"session": session, "messages": messages})
            return OK
        print(f"session {session_id}  source {session.get('source') or '-'}  model {session.get('model') or '-'}")
        if session.get("title"):
            print(f"title: {session['title']}")
        ended = f", ended {when(session.get('ended_at'))} ({session.get('end_reason')})" if session.get("ended_at") else ""
        print(f"started {when(session.get('started_at'))}{ended}; {session.get('message_count') or 0} messages, "
              f"{session.get('tool_call_count') or 0} tool calls")
        print(_usage_line(session))
        if session.get("parent_session_id"):
            print(f"parent: {session['parent_session_id']}")
        print()
        async for page in iter_messages(db, session_id):
            for message in page:
                _print_message(message)
    return OK


async def run_delete(args: argparse.Namespace) -> int:
    deleted: list[str] = []
    missing: list[str] = []
    async with open_store(args.target, read_only=False) as db:
        for session_id in dict.fromkeys(args.session_ids):
            (deleted if await db.delete_session(session_id) else missing).append(session_id)
    if args.json:
        print_json({"deleted": deleted, "not_found": missing})
    else:
        for session_id in deleted:
            print(f"deleted {session_id}")
        for session_id in missing:
            print(f"no session {session_id}")
    return NOT_FOUND if missing else OK


async def run_prune(args: argparse.Namespace) -> int:
    async with open_store(args.target, read_only=args.dry_run) as db:
        candidates = await db.list_prune_candidates(older_than_days=args.older_than, source=args.source)
        deleted = 0
        if not args.dry_run and candidates:
            bar = progress(len(candidates), "prune")
            try:
                deleted = await db.prune_sessions(older_than_days=args.older_than, source=args.source)
                bar.update(deleted)
            finally:
                bar.close()
    if args.json:
        print_json({"dry_run": args.dry_run, "candidates": candidates, "deleted": deleted})
        return OK
    for row in candidates:
        print(f"{'would delete' if args.dry_run else 'candidate'} {row['id']}  last active "
              f"{when(row.get('last_active'))}  {row.get('message_count') or 0} msgs")
    print(f"{len(candidates)} session(s) would be deleted" if args.dry_run else f"deleted {deleted} session(s)")
    return OK
