"""A worker process for the transaction-pooler tests (run as ``python -m tests.pooler_worker``).

``mixed DSN WORKER AGENTS ROUNDS``: opens the store (migrating a fresh
schema, possibly at the same moment as other workers), then AGENTS agents
each run ROUNDS rounds of the public methods a host uses: create, append,
batch append, read, search, a turn lease (shared session across workers),
compaction, title, listing, vacuum (worker ``w0`` only), and closes. Every
call's exception is caught and counted by type and message; prints one JSON
line: ``{"calls": n, "errors": [[type, message], ...], "appended": {...}}``.
``wait DSN SESSION``: waits for SESSION's turn lease (poll interval 5 s),
prints ``waiting``, then, once granted, ``{"waited": seconds}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from hermes_state.postgres import SessionDB


class Tally:
    def __init__(self) -> None:
        self.calls = 0
        self.errors: list[list[str]] = []

    async def __call__(self, awaitable: Any) -> Any:
        self.calls += 1
        try:
            return await awaitable
        except Exception as exc:
            self.errors.append([type(exc).__name__, str(exc)[:300]])
            return None


async def mixed(dsn: str, worker: str, agents: int, rounds: int) -> None:
    tally = Tally()
    appended: dict[str, int] = {}
    db = SessionDB(dsn)
    await tally(db.create_session(f"{worker}-root", "cli"))  # the first call opens (and migrates)

    async def agent(n: int) -> None:
        own = f"{worker}-a{n}"
        await tally(db.create_session(own, "cli", model="m"))
        for r in range(rounds):
            if await tally(db.append_message(own, "user", f"question {worker} {n} {r} zebra")) is not None:
                appended[own] = appended.get(own, 0) + 1
            rows = [{"role": "assistant", "content": f"answer {r}.{k}"} for k in range(3)]
            if await tally(db.append_messages_batch(own, rows)) == 3:
                appended[own] = appended.get(own, 0) + 3
            await tally(db.get_messages(own))
            await tally(db.search_messages("zebra", limit=5))
            await tally(db.get_session(own))
            await tally(db.list_sessions_rich(limit=5))
            await tally(db.set_session_title(own, f"title {worker} {n} {r}"))
            await tally(turn(db, own, worker, n, r))
        summary = [{"role": "user", "content": f"summary of {own}"}]
        await tally(db.archive_and_compact(own, summary))

    await asyncio.gather(*(agent(n) for n in range(agents)))
    if worker == "w0":
        await tally(db.vacuum())
    await tally(db.storage_info())
    await tally(db.close())
    print(json.dumps({"calls": tally.calls, "errors": tally.errors, "appended": appended}), flush=True)


async def turn(db: Any, own: str, worker: str, n: int, r: int) -> None:
    # One session every agent of every worker writes to: the lease serialises them.
    await db.create_session("shared", "cli")
    async with db.session_turn("shared", f"{worker}-{n}", ttl_seconds=30, poll_interval_seconds=0.2) as held:
        await held.append_message("shared", "user", f"{worker}-{n}-{r}")


async def wait(dsn: str, session_id: str) -> None:
    db = SessionDB(dsn)
    await db.get_session(session_id)  # opened (and listening, behind a pooler) before the wait starts
    await asyncio.sleep(1.0)
    print("waiting", flush=True)
    async with db.session_turn(session_id, "waiter", ttl_seconds=30, poll_interval_seconds=5.0) as held:
        waited = held.waited
    await db.close()
    print(json.dumps({"waited": waited}), flush=True)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "mixed":
        asyncio.run(mixed(rest[0], rest[1], int(rest[2]), int(rest[3])))
    elif mode == "wait":
        asyncio.run(wait(rest[0], rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")
