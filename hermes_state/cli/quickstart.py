"""``quickstart``: write, read and search two demo sessions; safe to run again (it replaces them)."""

from __future__ import annotations

import argparse
from typing import Callable

from .errors import OK
from .output import print_json
from .render import content_text, one_line, tool_call_text
from .target import open_store

__all__ = ["add_parser", "DEMO_SESSION_IDS"]

DEMO_SESSION_IDS = ("quickstart-demo-1", "quickstart-demo-2")


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    parser = add("quickstart", "write, read and search two demo sessions in the store (a re-run replaces them)")
    parser.set_defaults(run=run_quickstart)


async def run_quickstart(args: argparse.Namespace) -> int:
    first, second = DEMO_SESSION_IDS
    lines: list[str] = []
    async with open_store(args.target, read_only=False) as db:
        info = await db.storage_info()
        versions = ", ".join(f"{k.replace('_', ' ')} {info[k]}" for k in ("sqlite_version", "server_version") if info.get(k))
        lines.append(f"store: {args.target}")
        lines.append(f"  {info.get('driver')} ({versions}), journal={info.get('journal_mode')}, "
                     f"schema v{info.get('schema_version')}")
        for session_id in DEMO_SESSION_IDS:  # a re-run replaces the demo instead of piling up copies
            await db.delete_session(session_id)
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
        await db.update_token_counts(first, input_tokens=1200, output_tokens=340, model="example-model",
                                     api_call_count=2)
        await db.end_session(first, "quickstart_done")
        await db.create_session(second, source="quickstart", model="example-model")
        written = await db.append_messages_batch(second, [
            {"role": "user", "content": "Summarise yesterday's deployment notes"},
            {"role": "assistant", "content": "Deployment moved to blue/green; rollback takes two minutes."},
        ])
        await db.end_session(second, "quickstart_done")
        lines.append(f"wrote sessions {first} (4 messages) and {second} ({written} messages), both ended")
        session = await db.get_session(first) or {}
        lines.append(f"read back {first}: {session.get('message_count')} messages, "
                     f"{session.get('tool_call_count')} tool call, {session.get('input_tokens')} input tokens, "
                     f"ended: {session.get('end_reason')}")
        for message in await db.get_messages_as_conversation(first):
            text = content_text(message.get("content"))
            if message.get("tool_calls"):
                text = "calls " + "; ".join(tool_call_text(call) for call in message["tool_calls"])
            lines.append(f"  {message['role']:>9}: {one_line(text, 90)}")
        hits = await db.search_messages("deployment", source_filter=["quickstart"], limit=5)
        lines.append(f"search 'deployment': {len(hits)} hit(s)")
        lines.extend(f"  {hit['session_id']} {hit['role']}: {hit['snippet']}" for hit in hits)
        total = await db.message_count()
        lines.append(f"total messages in the store: {total}")
    db_option = f" --db {args.target}" if args.db is not None else ""
    remove = f"python3 -m hermes_state{db_option} sessions delete {first} {second}"
    lines.append(f"remove the demo sessions with: {remove}")
    if args.json:
        print_json({"sessions": list(DEMO_SESSION_IDS), "search_hits": len(hits), "total_messages": total,
                    "remove_with": remove})
    else:
        print("\n".join(lines))
    return OK
