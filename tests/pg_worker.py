"""A worker process for the multi-process PostgreSQL tests (run as ``python -m tests.pg_worker``).

``agents DSN WORKER AGENTS APPENDS``: AGENTS concurrent agents, each appending
APPENDS messages, alternating between its own session and the shared one;
prints one JSON line of what was acknowledged.
``stream DSN SESSION``: appends to SESSION forever, printing each acknowledged
content as soon as its ``await`` returned (the parent SIGKILLs it).
``resume DSN SESSION``: reads SESSION back, appends one message, prints the
contents as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

from hermes_state.postgres import SessionDB


async def agents(dsn: str, worker: str, count: int, appends: int) -> None:
    async with SessionDB(dsn) as db:
        acknowledged: dict[str, list[str]] = {}

        async def agent(n: int) -> None:
            own = f"{worker}-a{n}"
            await db.create_session(own, "cli")
            for i in range(appends):
                target = own if i % 2 == 0 else "shared"
                content = f"{worker}-a{n}-{i}"
                await db.append_message(target, "user", content)
                acknowledged.setdefault(target, []).append(content)

        await asyncio.gather(*(agent(n) for n in range(count)))
        stats = await db.writer_stats()
    print(json.dumps({"acknowledged": acknowledged, "stats": stats}), flush=True)


async def stream(dsn: str, session_id: str) -> None:
    async with SessionDB(dsn) as db:
        n = 0
        while True:
            # Several appends in flight at once, so the kill lands inside a group commit.
            batch = [f"m{n + k}" for k in range(8)]
            for content, result in zip(batch, await asyncio.gather(
                *(db.append_message(session_id, "user", c) for c in batch), return_exceptions=True
            )):
                if not isinstance(result, BaseException):
                    print(content, flush=True)
            n += len(batch)


async def resume(dsn: str, session_id: str) -> None:
    async with SessionDB(dsn) as db:
        before = [m["content"] for m in await db.get_messages(session_id)]
        await db.append_message(session_id, "user", "resumed")
        session = await db.get_session(session_id)
    print(json.dumps({"before": before, "message_count": session["message_count"] if session else None}), flush=True)


def main(argv: list[str]) -> None:
    mode, dsn = argv[0], argv[1]
    if mode == "agents":
        asyncio.run(agents(dsn, argv[2], int(argv[3]), int(argv[4])))
    elif mode == "stream":
        asyncio.run(stream(dsn, argv[2]))
    elif mode == "resume":
        asyncio.run(resume(dsn, argv[2]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
