"""The single writer: a queue of commands drained by one task, in group commits.

Callers put ``(command, future)`` on the queue and await the future. The
writer task takes one item, then everything else already waiting (bounded in
count and bytes), hands the batch to the backend as one transaction, and
resolves every future only after that transaction committed. Because one task
does all writing, writes are ordered by construction; because it batches,
many concurrent agents share one fsync.

A caller cancelled while its command still waits in the queue withdraws it
(the command is skipped); once the writer took it, the command commits or
rolls back whole and only the result is discarded. ``stop()`` refuses new
commands and waits, so everything queued before it is applied first.

The task lives only while there is work: it exits once the queue is empty
(after resolving the last batch's callers and one more look), and the next
``submit`` starts it again. The emptiness check and the exit happen in one
step of the event loop, as does a ``submit``'s put and its look at the task,
so a command is never left in a queue without a task to take it. An idle
store therefore holds no task a host's leak check could report.

A backend may offer ``start_batch(commands, report)`` instead of awaiting
``apply_batch``: it starts the batch and later calls ``report(outcomes,
error)`` on the event loop. That report does what the writer task's step
would: it counts the batch, resolves its futures, takes whatever is queued
by then and starts it; with nothing queued it looks once more right after
the resolved callers ran (one may write again at once). The task only waits
for the chain to run dry, so a batch costs loop callbacks instead of a chain
of task wake-ups, and a caller awaiting each append runs again in the very
next loop iteration.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable, Sequence

from .backend import Outcome, Report
from .commands.base import Command
from .errors import WriteNotAppliedError

__all__ = ["WriteNotAppliedError", "WriterActor", "WriterStoppedError"]

log = logging.getLogger("hermes_state.actor")

ApplyBatch = Callable[[Sequence[Command]], Awaitable[list[Outcome]]]
StartBatch = Callable[[Sequence[Command], Report], None]
# How a chain of started batches ended: the last batch and its error (None: all applied).
_ChainEnd = tuple[list["_Item"], BaseException | None]

MAX_BATCH_COMMANDS = 1024
MAX_BATCH_BYTES = 16 * 1024 * 1024
QUEUE_LIMIT = 8192
LATENCY_WINDOW = 1024  # commit latencies kept for the p50/p99 of writer_stats()
STATS_LOG_INTERVAL = 60.0  # seconds between DEBUG lines with writer_stats()


class WriterStoppedError(RuntimeError):
    """The writer task is gone; the command was not applied."""


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


class _Item:
    __slots__ = ("command", "future", "size")

    def __init__(self, command: Command, future: asyncio.Future[Any], size: int) -> None:
        self.command = command
        self.future = future
        self.size = size



class WriterActor:
    """Owns the write queue and the task that drains it."""

    def __init__(
        self,
        apply: ApplyBatch,
        *,
        max_batch: int = MAX_BATCH_COMMANDS,
        max_bytes: int = MAX_BATCH_BYTES,
        queue_limit: int = QUEUE_LIMIT,
        name: str = "hermes-state-writer",
        start: StartBatch | None = None,
    ) -> None:
        self._apply = apply
        self._start = start
        self._in_flight: list[_Item] = []
        self._max_batch = max_batch
        self._max_bytes = max_bytes
        self._queue_limit = queue_limit
        self._name = name
        self._queue: asyncio.Queue[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._stopping = False
        self.batches = 0
        self.commands = 0
        self.max_batch_seen = 0
        self.failed = 0
        self.retried_batches = 0
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._last_log = time.monotonic()
        self.log_interval = STATS_LOG_INTERVAL

    # ------------------------------------------------------------------ public

    def start(self) -> None:
        """Accept writes from now on (idempotent); the task starts with the first queued command."""
        if self._queue is None:
            self._queue = asyncio.Queue(self._queue_limit)
        self._started = True

    def rebind(self) -> None:
        """Forget the event loop of earlier use: a fresh queue for the loop the store runs on now.

        Called only when nothing of this actor can still run on the old loop
        (it is closed, or idle); whatever a closed loop left queued was
        abandoned with its callers and is dropped.
        """
        # Their callers' loop is closed: nobody waits for these any more.
        self._in_flight = []
        self._task = None
        if self._queue is not None:
            self._queue = asyncio.Queue(self._queue_limit)

    @property
    def running(self) -> bool:
        """True while the actor accepts writes (between ``start()`` and ``stop()``)."""
        return self._started and not self._stopping

    @property
    def idle(self) -> bool:
        """True when no command is queued or being applied (no writer task)."""
        task = self._task
        return (task is None or task.done()) and (self._queue is None or self._queue.empty())

    async def submit(self, command: Command, size: int = 0) -> Any:
        """Queue ``command`` and wait until it has committed; returns its result."""
        queue = self._queue
        if queue is None or self._stopping or not self._started:
            raise WriterStoppedError("the SessionDB writer is not running")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = _Item(command, future, size)
        try:
            queue.put_nowait(item)  # the common case: no coroutine for a queue with room
        except asyncio.QueueFull:
            await queue.put(item)
        task = self._task
        if task is None or task.done():  # done: cancelled before its first step (loop shutdown)
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
        return await future

    def stats(self) -> dict[str, Any]:
        """Counters since start: queue depth, batches, commands per batch, commit latency (ms), failures."""
        latencies = list(self._latencies)
        return {
            "queue_depth": self._queue.qsize() if self._queue is not None else 0,
            "batches_applied": self.batches,
            "commands_applied": self.commands,
            "commands_per_batch_mean": self.commands / self.batches if self.batches else 0.0,
            "commands_per_batch_max": self.max_batch_seen,
            "commit_latency_p50_ms": _percentile(latencies, 0.50),
            "commit_latency_p99_ms": _percentile(latencies, 0.99),
            "latency_window": len(latencies),
            "failed_commands": self.failed,
            "retried_batches": self.retried_batches,
        }

    def _maybe_log(self) -> None:
        now = time.monotonic()
        if now - self._last_log >= self.log_interval:
            self._last_log = now
            if log.isEnabledFor(logging.DEBUG):
                log.debug("writer stats %s: %s", self._name, self.stats())

    async def stop(self) -> None:
        """Apply everything queued so far, then stop accepting writes."""
        self._stopping = True
        while True:
            task = self._task
            if task is None or task.done():
                # A caller that waited for room in a full queue resumes now and
                # starts a task for its command: one loop pass, then look again.
                await asyncio.sleep(0)
                if self._task is not task:
                    continue
                if self._queue is None or self._queue.empty():
                    return  # idle: nothing queued
                task = self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():
                    raise

    # ---------------------------------------------------------------- internal

    def _take_batch(self, first: _Item) -> list[_Item]:
        assert self._queue is not None
        batch = [first]
        if self._queue.empty():  # one caller: no QueueEmpty raised below
            return batch
        size = first.size
        while len(batch) < self._max_batch and size < self._max_bytes:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            batch.append(item)
            size += item.size
        return batch

    async def _run(self) -> None:
        queue = self._queue
        assert queue is not None
        try:
            # No await between the last look at the queue and the exit below:
            # a submit either put its command before that look or finds no task.
            while not queue.empty():
                batch = self._take_batch(queue.get_nowait())
                if self._start is not None:
                    await self._run_chain(batch)
                else:
                    await self._apply_and_resolve(batch)
        except BaseException:
            self._fail_pending(WriterStoppedError("the SessionDB writer stopped before this write was applied"))
            raise
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _run_chain(self, batch: list[_Item]) -> None:
        """Apply ``batch`` and every batch queued behind it through the start hook.

        A batch known not applied is retried once; any other error fails
        that batch's callers and ends the chain (the task takes the next).
        """
        loop = asyncio.get_running_loop()
        retried: list[_Item] | None = None
        while True:
            ended: asyncio.Future[_ChainEnd] = loop.create_future()
            self._launch(batch, ended)
            try:
                batch, error = await ended
            except asyncio.CancelledError:
                self._abandon(self._in_flight)
                raise
            if error is None:
                return
            if isinstance(error, WriteNotAppliedError) and batch is not retried:
                retried = batch
                self.retried_batches += 1  # nothing of it committed: once more, without withdrawn callers
                continue
            self._fail(batch, error)
            return

    def _launch(self, batch: list[_Item], ended: asyncio.Future[_ChainEnd]) -> None:
        """Start the live items of ``batch``; its report settles them and launches what is queued by then.

        Each batch goes through the start hook current at its launch.
        """
        start = self._start
        assert start is not None
        live = [item for item in batch if not item.future.done()]
        while not live:  # every caller withdrew: on to what is queued
            following = self._next_batch()
            if following is None:
                ended.set_result((batch, None))
                return
            batch = following
            live = [item for item in batch if not item.future.done()]
        self._in_flight = batch
        started = time.perf_counter()

        def report(outcomes: list[Outcome] | None, error: BaseException | None) -> None:
            if outcomes is not None:
                # Counted before the callers resume, as in the apply path.
                self._resolve(live, outcomes, started)
            if ended.done():  # the writer task was cancelled meanwhile: no more batches
                return
            if outcomes is None:
                ended.set_result((batch, error or RuntimeError("the batch reported nothing")))
                return
            self._maybe_log()
            following = self._next_batch()
            if following is not None:
                self._launch(following, ended)
            else:
                # The callers just resolved run first in the next loop iteration;
                # one that writes again at once (an agent appending turn after
                # turn) is then started from here, with no writer-task step.
                asyncio.get_running_loop().call_soon(recheck)

        def recheck() -> None:
            if ended.done():  # the writer task was cancelled meanwhile
                return
            following = self._next_batch()
            if following is None:
                ended.set_result((batch, None))  # idle: the task takes its last look and exits
            else:
                self._launch(following, ended)

        try:
            start([item.command for item in live], report)
        except Exception as exc:
            ended.set_result((batch, exc))

    def _next_batch(self) -> list[_Item] | None:
        """The batch already waiting in the queue, or None."""
        assert self._queue is not None
        if self._queue.empty():  # the common case of one caller: no exception raised per batch
            return None
        return self._take_batch(self._queue.get_nowait())

    @staticmethod
    def _abandon(batch: list[_Item]) -> None:
        for item in batch:
            if not item.future.done():
                item.future.set_exception(
                    WriterStoppedError(
                        "the SessionDB writer was cancelled while applying this write; it may or may "
                        "not have committed (close the store before the event loop shuts down)"
                    )
                )

    def _fail(self, batch: list[_Item], error: BaseException) -> None:
        """Fail the callers of a batch that raised as a whole (those still waiting)."""
        for item in batch:
            if not item.future.done():
                self.failed += 1
                item.future.set_exception(error)
        self._maybe_log()

    def _resolve(self, live: list[_Item], outcomes: list[Outcome], started: float) -> None:
        """Count the applied batch, then resolve its callers' futures."""
        self._latencies.append((time.perf_counter() - started) * 1000.0)
        self.batches += 1
        self.commands += len(live)
        self.max_batch_seen = max(self.max_batch_seen, len(live))
        for item, (ok, value) in zip(live, outcomes):
            if not ok:
                self.failed += 1
            if item.future.done():
                continue
            if ok:
                item.future.set_result(value)
            else:
                item.future.set_exception(value)

    async def _apply_live(self, batch: list[_Item]) -> tuple[list[_Item], list[Any], float] | None:
        """Apply the items whose callers still wait; a batch known not applied is retried once."""
        for attempt in (1, 2):
            live = [item for item in batch if not item.future.done()]
            if not live:
                return None
            started = time.perf_counter()
            try:
                # Shielded: the transaction finishes regardless; cancelling this
                # task must not orphan futures.
                outcomes = await asyncio.shield(self._apply([item.command for item in live]))
            except WriteNotAppliedError:
                if attempt == 2:
                    raise
                self.retried_batches += 1  # nothing of it committed: once more, without withdrawn callers
                continue
            return live, outcomes, started
        return None  # pragma: no cover (the loop returns or raises)

    async def _apply_and_resolve(self, batch: list[_Item]) -> None:
        try:
            applied = await self._apply_live(batch)
        except asyncio.CancelledError:
            self._abandon(batch)
            raise
        except Exception as exc:
            self._fail(batch, exc)
            return
        if applied is None:
            return
        live, outcomes, started = applied
        self._resolve(live, outcomes, started)
        self._maybe_log()

    def _fail_pending(self, exc: Exception) -> None:
        if self._queue is None:
            return
        while True:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if not item.future.done():
                item.future.set_exception(exc)
