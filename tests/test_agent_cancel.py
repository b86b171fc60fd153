"""Cancellation at every boundary of a turn, close() while a turn runs, and crash/restart in real processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_agent import (
    AIAgent,
    ProviderRequest,
    ScriptedProvider,
    tool_call,
    tool_calls_reply,
)

from .test_agent_support import SpyDB, gated_tool, needs, opened, quick, rows

ROOT = Path(__file__).resolve().parent.parent


class GatedDB(SpyDB):
    """A SpyDB whose first ``create_session`` and every ``flush_token_counts`` can be held open."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold_first_create = False
        self.create_entered = asyncio.Event()
        self.finalizer_entered = asyncio.Event()
        self.finalizer_delay = 0.0
        self.finalizer_runs = 0
        self.hold_after_append: str | None = None  # role whose committed append is held open once
        self.append_committed = asyncio.Event()
        self.release_append = asyncio.Event()

    async def append_message(self, session_id: str, role: str, content: Any = None, **kwargs: Any) -> int:
        row_id = await super().append_message(session_id, role, content, **kwargs)
        if role == self.hold_after_append:
            self.hold_after_append = None
            self.append_committed.set()
            await self.release_append.wait()  # committed, but the caller has not returned yet
        return row_id

    async def create_session(self, session_id: str, source: str, **kwargs: Any) -> str:
        if self.hold_first_create:
            self.hold_first_create = False
            self.create_entered.set()
            await asyncio.Event().wait()  # until cancelled
        return await super().create_session(session_id, source, **kwargs)

    async def flush_token_counts(self, timeout: float = 5.0) -> bool:
        self.finalizer_runs += 1
        self.finalizer_entered.set()
        await asyncio.sleep(self.finalizer_delay)
        return True


@pytest.fixture
async def gdb(db_path: Path) -> AsyncIterator[GatedDB]:
    async with opened(GatedDB(db_path)) as db:
        yield db


def _blocking_provider(entered: asyncio.Event) -> ScriptedProvider:
    async def block(request: ProviderRequest) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    return ScriptedProvider([block])


async def _cancel_when(task: asyncio.Task[Any], event: asyncio.Event, times: int = 1) -> None:
    await asyncio.wait_for(event.wait(), 5)
    for _ in range(times):
        task.cancel()
        await asyncio.sleep(0)


async def test_cancel_during_prologue_persists_the_user_row(gdb: GatedDB) -> None:
    gdb.hold_first_create = True
    provider = ScriptedProvider(["unused"])
    agent = AIAgent(provider, session_db=gdb, tools=[])
    task = asyncio.ensure_future(agent.run_conversation("early question"))
    await _cancel_when(task, gdb.create_entered)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert provider.requests == []
    assert await rows(gdb, agent.session_id) == [("user", "early question")]


async def test_cancel_during_provider_call_keeps_only_the_user_row(gdb: GatedDB, tmp_path: Path) -> None:
    entered = asyncio.Event()
    provider = _blocking_provider(entered)
    agent = AIAgent(provider, session_db=gdb, tools=[], save_trajectories=True, trajectory_dir=tmp_path)
    task = asyncio.ensure_future(agent.run_conversation("slow question"))
    await _cancel_when(task, entered)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await rows(gdb, agent.session_id) == [("user", "slow question")]
    (record,) = [json.loads(line) for line in (tmp_path / "failed_trajectories.jsonl").read_text().splitlines()]
    assert record["completed"] is False and record["conversations"][1]["value"] == "slow question"

    provider.extend(["recovered"])
    assert await agent.chat("try again") == "recovered"
    assert await rows(gdb, agent.session_id) == [
        ("user", "slow question"), ("user", "try again"), ("assistant", "recovered")]


async def test_cancel_during_sequential_tool_closes_the_tail(gdb: GatedDB) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    provider = ScriptedProvider([tool_calls_reply(tool_call("slow", {}, call_id="s1"))])
    agent = AIAgent(provider, session_db=gdb, tools=[gated_tool("slow", started, release)])
    task = asyncio.ensure_future(agent.run_conversation("run the slow tool"))
    await _cancel_when(task, started)
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await gdb.get_messages(agent.session_id)
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "run the slow tool"),
        ("assistant", None),
        ("tool", "[Tool execution cancelled — slow was skipped due to user interrupt]"),
        ("assistant", "Operation interrupted."),
    ]
    assert stored[2]["tool_call_id"] == "s1" and stored[2]["tool_name"] == "slow"


async def test_cancel_during_parallel_batch_keeps_finished_results_in_call_order(gdb: GatedDB) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    calls = [tool_call("quick", {}, call_id="q"), tool_call("slow", {}, call_id="s"),
             tool_call("after", {}, call_id="a")]
    agent = AIAgent(ScriptedProvider([tool_calls_reply(*calls)]), session_db=gdb,
                    tools=[quick, gated_tool("slow", started, release, parallel_safe=True),
                           gated_tool("after", asyncio.Event(), asyncio.Event())])
    task = asyncio.ensure_future(agent.run_conversation("batch"))
    await _cancel_when(task, started)
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await gdb.get_messages(agent.session_id)
    assert [(m["role"], m.get("tool_call_id"), m["content"]) for m in stored] == [
        ("user", None, "batch"),
        ("assistant", None, None),
        ("tool", "q", "quick result"),
        ("tool", "s", "[Tool execution cancelled — slow was cancelled before a result was available]"),
        ("tool", "a", "[Tool execution cancelled — call was skipped due to user interrupt]"),
        ("assistant", None, "Operation interrupted."),
    ]


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


async def _read_fifo_after(
    task: asyncio.Task[Any], fifo: Path, cancels: int, ready: Callable[[], Awaitable[bool]] | None = None
) -> list[dict[str, Any]]:
    """Cancel ``task`` repeatedly while its finalizer is blocked writing the trajectory into ``fifo``.

    ``ready`` (polled) says when the turn has reached its finalizer; the FIFO
    read is bounded so a turn that never writes fails the test instead of
    hanging the run.
    """
    if ready is not None:
        deadline = asyncio.get_running_loop().time() + 10
        while not await ready():
            assert asyncio.get_running_loop().time() < deadline, "the turn never reached its finalizer"
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the finalizer is now blocked opening the FIFO for writing
    for _ in range(cancels):
        task.cancel()
        await asyncio.sleep(0.01)
    reader = asyncio.ensure_future(asyncio.to_thread(fifo.read_text))
    done, _ = await asyncio.wait({reader}, timeout=30)
    if not done:
        # Nobody opened the FIFO for writing: release the blocked reader thread, then fail.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        await reader
        pytest.fail("the finalizer never wrote the trajectory record")
    return [json.loads(line) for line in reader.result().splitlines()]


async def test_cancel_during_normal_finalizer_runs_it_once_then_propagates(gdb: GatedDB, tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "traj" / "trajectory_samples.jsonl")
    agent = AIAgent(ScriptedProvider(["the answer"]), session_db=gdb, tools=[],
                    save_trajectories=True, trajectory_dir=fifo.parent)
    task = asyncio.ensure_future(agent.run_conversation("question"))

    async def answered() -> bool:  # the final answer is persisted just before the finalizer
        return agent.session_id is not None and ("assistant", "the answer") in await rows(gdb, agent.session_id)

    (record,) = await _read_fifo_after(task, fifo, cancels=3, ready=answered)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert record["completed"] is True  # one whole record, written under cancellation
    assert gdb.finalizer_runs == 1  # the rest of the finalizer still ran, once
    assert await rows(gdb, agent.session_id) == [("user", "question"), ("assistant", "the answer")]


async def test_repeated_cancellation_waits_for_the_cancelled_turn_finalizer(gdb: GatedDB, tmp_path: Path) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    fifo = _fifo(tmp_path / "traj" / "failed_trajectories.jsonl")
    agent = AIAgent(ScriptedProvider([tool_calls_reply(tool_call("slow", {}, call_id="s1"))]), session_db=gdb,
                    tools=[gated_tool("slow", started, release)], save_trajectories=True,
                    trajectory_dir=fifo.parent)
    task = asyncio.ensure_future(agent.run_conversation("hold on"))
    await _cancel_when(task, started)
    (record,) = await _read_fifo_after(task, fifo, cancels=5)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert record["completed"] is False
    # The trajectory is taken before the tail repair; the store gets the repaired tail.
    assert [e["from"] for e in record["conversations"]] == ["system", "human", "gpt", "tool"]
    assert gdb.finalizer_runs == 1
    assert [r for r, _ in await rows(gdb, agent.session_id)] == ["user", "assistant", "tool", "assistant"]


async def test_cancel_while_an_append_is_in_flight_never_writes_it_twice(gdb: GatedDB) -> None:
    gdb.hold_after_append = "assistant"
    agent = AIAgent(ScriptedProvider(["final words"]), session_db=gdb, tools=[])
    task = asyncio.ensure_future(agent.run_conversation("question"))
    await _cancel_when(task, gdb.append_committed, times=2)
    gdb.release_append.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await rows(gdb, agent.session_id) == [("user", "question"), ("assistant", "final words")]


async def test_cancel_while_waiting_for_the_turn_lock_writes_nothing(gdb: GatedDB) -> None:
    entered = asyncio.Event()
    provider = _blocking_provider(entered)
    agent = AIAgent(provider, session_db=gdb, tools=[])
    first = asyncio.ensure_future(agent.run_conversation("first"))
    await asyncio.wait_for(entered.wait(), 5)
    second = asyncio.ensure_future(agent.run_conversation("second"))
    await asyncio.sleep(0.01)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await rows(gdb, agent.session_id) == [("user", "first")]


async def test_close_cancels_and_awaits_the_active_turn(gdb: GatedDB) -> None:
    entered = asyncio.Event()
    agent = AIAgent(_blocking_provider(entered), session_db=gdb, tools=[])
    task = asyncio.ensure_future(agent.run_conversation("in flight"))
    await asyncio.wait_for(entered.wait(), 5)
    await agent.close()
    assert task.cancelled()
    assert await rows(gdb, agent.session_id) == [("user", "in flight")]
    assert (await gdb.get_session(agent.session_id))["end_reason"] == "agent_close"
    assert not gdb.closed


async def test_close_finishes_through_repeated_cancellation(gdb: GatedDB) -> None:
    entered = asyncio.Event()
    gdb.finalizer_delay = 0.1
    agent = AIAgent(_blocking_provider(entered), session_db=gdb, tools=[])
    turn = asyncio.ensure_future(agent.run_conversation("busy"))
    await asyncio.wait_for(entered.wait(), 5)
    closer = asyncio.ensure_future(agent.close())
    await _cancel_when(closer, gdb.finalizer_entered, times=4)
    with pytest.raises(asyncio.CancelledError):
        await closer
    assert agent.closed and turn.done()
    assert (await gdb.get_session(agent.session_id))["end_reason"] == "agent_close"
    await agent.close()  # already closed: returns at once


# ------------------------------------------------------------------ real processes

_WORKER = textwrap.dedent(
    """
    import asyncio, hashlib, json, os, sys
    sys.path.insert(0, {root!r})
    from hermes_agent import AIAgent, ProviderRequest, ScriptedProvider, Tool, load_resume_history, tool_call, tool_calls_reply
    from hermes_state import SessionDB

    mode, db_path, session_id = sys.argv[1:4]

    async def crash(arguments, context):
        os._exit(17)  # the process dies while the tool runs

    async def main():
        db = SessionDB(db_path)
        if mode == "crash":
            agent = AIAgent(ScriptedProvider([tool_calls_reply(tool_call("crash", {{}}, call_id="boom"))]),
                            session_db=db, session_id=session_id, model="m",
                            tools=[Tool("crash", "dies", {{"type": "object", "properties": {{}}}}, crash)])
            await agent.run_conversation("please crash")
            return
        seen = []
        def answer(request: ProviderRequest):
            seen.append(request.messages)
            return "resumed fine"
        tip, history = await load_resume_history(db, session_id)
        agent = AIAgent(ScriptedProvider([answer]), session_db=db, session_id=tip, model="m", tools=[])
        result = await agent.run_conversation("continue", conversation_history=history)
        await agent.close()
        session = await db.get_session(tip)
        await db.close()
        print(json.dumps({{"tip": tip, "final": result["final_response"], "request": seen[0],
                          "prompt_sha": hashlib.sha256(session["system_prompt"].encode()).hexdigest()}}))

    asyncio.run(main())
    """
)


def _run_worker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "agent_worker.py"
    script.write_text(_WORKER.format(root=str(ROOT)))
    env = dict(os.environ)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp_path)


async def test_crash_mid_tool_leaves_the_durable_prefix(tmp_path: Path, db_path: Path) -> None:
    proc = _run_worker(tmp_path, "crash", str(db_path), "crash-1")
    assert proc.returncode == 17, proc.stderr
    async with opened(SpyDB(db_path)) as db:
        stored = await db.get_messages("crash-1")
        assert [(m["role"], m["content"]) for m in stored] == [("user", "please crash"), ("assistant", None)]
        assert stored[1]["tool_calls"][0]["id"] == "boom"
        assert (await db.get_session("crash-1"))["ended_at"] is None


@needs("get_resume_conversations", "compression/lineage")
async def test_crash_then_resume_in_a_fresh_process(tmp_path: Path, db_path: Path) -> None:
    assert _run_worker(tmp_path, "crash", str(db_path), "crash-2").returncode == 17
    async with opened(SpyDB(db_path)) as db:
        before = (await db.get_session("crash-2"))["system_prompt"]

    proc = _run_worker(tmp_path, "resume", str(db_path), "crash-2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tip"] == "crash-2" and out["final"] == "resumed fine"
    assert out["prompt_sha"] == hashlib.sha256(before.encode()).hexdigest()
    request = out["request"]
    assert request[0] == {"role": "system", "content": before}
    # The dangling call gets a stub in the request only; the new user turn follows.
    assert [m["role"] for m in request] == ["system", "user", "assistant", "tool", "user"]
    assert request[3]["tool_call_id"] == "boom" and request[-1]["content"] == "continue"

    async with opened(SpyDB(db_path)) as db:
        assert await rows(db, "crash-2") == [
            ("user", "please crash"), ("assistant", None), ("user", "continue"), ("assistant", "resumed fine")]
        assert (await db.get_session("crash-2"))["end_reason"] == "agent_close"
