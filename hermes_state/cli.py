"""The ``hermes-state`` command: a quick start and store inspection, through the public API."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from .store import SessionDB

__all__ = ["main"]


async def _quickstart(path: Path | None) -> int:
    db = SessionDB(path)
    stamp = time.strftime("%Y%m%d_%H%M%S")
    try:
        info = await db.storage_info()
        print(f"store: {db.db_path}")
        print(f"  {info['driver']} (SQLite {info['sqlite_version']}), journal={info['journal_mode']}, "
              f"schema v{info['schema_version']}")
        first = f"{stamp}_{uuid.uuid4().hex[:6]}"
        second = f"{stamp}_{uuid.uuid4().hex[:6]}"
        await db.create_session(first, source="quickstart", model="example-model",
                                system_prompt="You are a helpful agent.")
        await db.append_message(first, "user", "Why did the docker compose deployment fail?")
        await db.append_message(
            first, "assistant", None,
            tool_calls=[{"id": "call_1", "type": "function",
                         "function": {"name": "terminal", "arguments": '{"command": "docker compose logs"}'}}],
        )
        await db.append_message(first, "tool", "volume 'data' not found", tool_call_id="call_1", tool_name="terminal")
        await db.append_message(first, "assistant", "The compose file references a missing volume `data`.")
        await db.create_session(second, source="quickstart", model="example-model")
        written = await db.append_messages_batch(second, [
            {"role": "user", "content": "Summarise yesterday's deployment notes"},
            {"role": "assistant", "content": "Deployment moved to blue/green; rollback takes two minutes."},
        ])
        await db.update_token_counts(first, input_tokens=1200, output_tokens=340, model="example-model", api_call_count=2)
        await db.end_session(first, "quickstart_done")
        print(f"wrote sessions {first} (4 messages) and {second} ({written} messages)")
        session = await db.get_session(first)
        assert session is not None
        print(f"read back {first}: {session['message_count']} messages, {session['tool_call_count']} tool call, "
              f"{session['input_tokens']} input tokens, ended: {session['end_reason']}")
        for message in await db.get_messages_as_conversation(first):
            content = message.get("content") or json.dumps(message.get("tool_calls"))
            print(f"  {message['role']:>9}: {str(content)[:70]}")
        search = getattr(db, "search_messages", None)
        if search is not None:
            hits = await search("deployment", source_filter=["quickstart"], limit=5)
            print(f"search 'deployment': {len(hits)} hit(s)")
            for hit in hits:
                print(f"  {hit['session_id']} {hit['role']}: {hit['snippet']}")
        print(f"total messages in the store: {await db.message_count()}")
    finally:
        await db.close()
    return 0


async def _info(path: Path | None) -> int:
    db = SessionDB(path, read_only=True)
    try:
        info: dict[str, Any] = await db.storage_info()
        info["messages"] = await db.message_count()
        print(json.dumps(info, indent=2))
    finally:
        await db.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="hermes-state", description=__doc__)
    parser.add_argument("--db", type=Path, default=None, help="database file (default $HERMES_HOME/state.db)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("quickstart", help="write, read and search a few sessions in the store")
    sub.add_parser("info", help="show driver, SQLite version, journal mode and counts (read-only)")
    args = parser.parse_args(argv)
    try:
        if args.command == "quickstart":
            return asyncio.run(_quickstart(args.db))
        return asyncio.run(_info(args.db))
    except Exception as exc:  # a CLI prints the problem instead of a traceback
        print(f"hermes-state: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
