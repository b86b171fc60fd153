"""``search QUERY``: full-text search over messages, hits with snippets and session ids."""

from __future__ import annotations

import argparse
from typing import Callable

from .errors import OK
from .output import print_json, when
from .render import one_line
from .argtypes import non_negative
from .target import open_store

__all__ = ["add_parser"]


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add("search", "search message text; quoted phrases, OR, NOT and prefix* work")
    parser.add_argument("query", metavar="QUERY", help="words to find")
    parser.add_argument("--source", action="append", help="only these sources (repeatable)")
    parser.add_argument("--exclude-source", action="append", help="skip these sources (repeatable)")
    parser.add_argument("--role", action="append", help="only these roles: user, assistant, tool (repeatable)")
    parser.add_argument("--sort", choices=("relevance", "newest", "oldest"), default="relevance")
    parser.add_argument("--include-inactive", action="store_true", help="also search compacted history")
    parser.add_argument("--limit", type=non_negative, default=20, help="hits per page (default 20)")
    parser.add_argument("--offset", type=non_negative, default=0, help="skip this many hits")
    parser.set_defaults(run=run_search)


async def run_search(args: argparse.Namespace) -> int:
    async with open_store(args.target, read_only=True) as db:
        hits = await db.search_messages(
            args.query, source_filter=args.source, exclude_sources=args.exclude_source, role_filter=args.role,
            limit=args.limit, offset=args.offset, sort=None if args.sort == "relevance" else args.sort,
            include_inactive=args.include_inactive,
        )
    if args.json:
        print_json(hits)
        return OK
    if not hits:
        print("no matches")
        return OK
    for hit in hits:
        print(f"{hit.get('session_id')}  {when(hit.get('timestamp'))}  {hit.get('role')}"
              f"{' ' + hit['tool_name'] if hit.get('tool_name') else ''}  [{hit.get('source') or '-'}]")
        print(f"    {one_line(str(hit.get('snippet') or ''), 200)}")
    return OK
