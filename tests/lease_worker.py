"""A worker process for the multi-process turn-lease tests (run as ``python -m tests.lease_worker``).

``turns TARGET SESSION WORKER TURNS``: TURNS turns through ``session_turn``,
each appending ``WORKER:i:start`` and, a moment later, ``WORKER:i:end``;
prints one JSON line with the tokens it held and how long it waited.
``hold TARGET SESSION HOLDER TTL``: takes the lease, appends ``HOLDER:start``,
prints ``held <token>`` and sleeps (the parent kills it).
``stale TARGET SESSION HOLDER GO``: holds the lease with a 0.5 s TTL and no
refresh, prints ``held``, waits for the file GO, then tries one more fenced
append and prints ``refused`` or ``written``.
``waits TARGET SESSION HOLDER ROUNDS``: ROUNDS times: reads a line from
stdin, waits for the lease (poll 20 s, so only a wake-up is quick), printing
``waiting`` once it waits and then the wall time it held the lease, and releases it.
``fair TARGET SESSION WORKER TURNS:GO``: waits for the file GO, then TURNS
turns of about 10 ms through ``session_turn`` (default poll), each appending
``WORKER:i`` (it prints ``ready`` before it waits for GO); prints one JSON line with its longest wait.
TARGET is a SQLite path or a ``postgresql+asyncpg://`` DSN.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from typing import Any


def open_store(target: str) -> Any:
    if target.startswith("postgresql"):
        from hermes_state.postgres import SessionDB as PostgresSessionDB

        return PostgresSessionDB(target)
    from hermes_state import SessionDB

    return SessionDB(target)


async def turns(target: str, session_id: str, worker: str, count: int) -> None:
    db = open_store(target)
    tokens, waited = [], 0.0
    try:
        for i in range(count):
            async with db.session_turn(session_id, worker, ttl_seconds=30, poll_interval_seconds=2.0) as turn:
                tokens.append(turn.token)
                waited += turn.waited
                await turn.append_message(session_id, "user", f"{worker}:{i}:start")
                await asyncio.sleep(random.uniform(0.0, 0.02))
                await turn.append_message(session_id, "assistant", f"{worker}:{i}:end")
    finally:
        await db.close()
    print(json.dumps({"worker": worker, "tokens": tokens, "waited": waited}), flush=True)


async def hold(target: str, session_id: str, holder: str, ttl: float) -> None:
    db = open_store(target)
    assert await db.try_acquire_session_turn_lease(session_id, holder, ttl_seconds=ttl)
    await db.append_message(session_id, "user", f"{holder}:start", turn_lease_holder=holder)
    print(f"held {os.getpid()}", flush=True)
    await asyncio.sleep(3600)


async def stale(target: str, session_id: str, holder: str, go: str) -> None:
    from hermes_state import SessionTurnLeaseLostError

    db = open_store(target)
    try:
        async with db.session_turn(session_id, holder, ttl_seconds=0.5, refresh_interval_seconds=3600) as turn:
            await turn.append_message(session_id, "user", f"{holder}:start")
            print("held", flush=True)
            while not os.path.exists(go):
                await asyncio.sleep(0.01)
            try:
                await turn.append_message(session_id, "user", f"{holder}:stale")
            except SessionTurnLeaseLostError:
                print("refused", flush=True)
            else:
                print("written", flush=True)
    finally:
        await db.close()


async def waits(target: str, session_id: str, holder: str, rounds: int) -> None:
    db = open_store(target)
    try:
        await db.get_session(session_id)
        for _ in range(rounds):
            await asyncio.to_thread(sys.stdin.readline)
            assert await db.acquire_session_turn_lease(
                session_id, holder, wait_seconds=60, poll_interval_seconds=20,
                on_wait=lambda _elapsed: print("waiting", flush=True), wait_notice_interval_seconds=3600,
            )
            print(repr(time.time()), flush=True)
            await db.release_session_turn_lease(session_id, holder)
    finally:
        await db.close()


async def fair(target: str, session_id: str, worker: str, count: int, go: str) -> None:
    db = open_store(target)
    longest = 0.0
    try:
        await db.get_session(session_id)
        print("ready", flush=True)
        while not os.path.exists(go):
            await asyncio.sleep(0.005)
        for i in range(count):
            asked = time.monotonic()
            async with db.session_turn(session_id, worker, ttl_seconds=30) as turn:
                longest = max(longest, time.monotonic() - asked)
                await turn.append_message(session_id, "user", f"{worker}:{i}")
                await asyncio.sleep(0.01)
    finally:
        await db.close()
    print(json.dumps({"worker": worker, "longest_wait": longest}), flush=True)


def main(argv: list[str]) -> None:
    mode, target, session_id, name, extra = argv
    started = time.monotonic()
    if mode == "turns":
        asyncio.run(turns(target, session_id, name, int(extra)))
    elif mode == "hold":
        asyncio.run(hold(target, session_id, name, float(extra)))
    elif mode == "fair":
        turns_, go = extra.split(":", 1)
        asyncio.run(fair(target, session_id, name, int(turns_), go))
    elif mode == "waits":
        asyncio.run(waits(target, session_id, name, int(extra)))
    elif mode == "stale":
        asyncio.run(stale(target, session_id, name, extra))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"done {time.monotonic() - started:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
