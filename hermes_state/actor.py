"""The single writer: a queue of commands drained by one task, in group commits.

Callers put ``(command, future)`` on the queue and await the future. The
writer task takes one item, then everything else already waiting (bounded in
count and bytes), hands the batch to the backend as one transaction, and
resolves every future only after that transaction committed. Because one task
does all writing, writes are ordered by construction; because it batches,
many concurrent agents share one fsync.

A caller cancelled while its command still waits in the queue withdraws it
(the command is skipped); once the writer took it, the command commits or
rolls back whole and only the result is discarded. ``stop()`` enqueues a
sentinel and waits, so everything queued before it is applied first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable, Sequence

from .backend import Outcome
from .commands.base import Command
from .errors import WriteNotAppliedError

__all__ = ["WriteNotAppliedError", "WriterActor", "WriterStoppedError"]

log = logging.getLogger("hermes_state.actor")

ApplyBatch = Callable[[Sequence[Command]], Awaitable[list[Outcome]]]

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


_STOP = object()


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
    ) -> None:
        self._apply = apply
        self._max_batch = max_batch
        self._max_bytes = max_bytes
        self._queue_limit = queue_limit
        self._name = name
        self._queue: asyncio.Queue[Any] | None = None
        self._task: asyncio.Task[None] | None = None
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
        """Create the queue and the writer task on the running loop (idempotent)."""
        if self._task is None:
            self._queue = asyncio.Queue(self._queue_limit)
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._stopping

    async def submit(self, command: Command, size: int = 0) -> Any:
        """Queue ``command`` and wait until it has committed; returns its result."""
        if not self.running or self._queue is None:
            raise WriterStoppedError("the SessionDB writer is not running")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        item = _Item(command, future, size)
        try:
            self._queue.put_nowait(item)  # the common case: no coroutine for a queue with room
        except asyncio.QueueFull:
            await self._queue.put(item)
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
        """Apply everything queued so far, then end the writer task."""
        if self._task is None or self._queue is None:
            return
        if not self._stopping:
            self._stopping = True
            if not self._task.done():
                await self._queue.put(_STOP)
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():
                raise

    # ---------------------------------------------------------------- internal

    def _take_batch(self, first: _Item) -> tuple[list[_Item], bool]:
        assert self._queue is not None
        batch = [first]
        size = first.size
        while len(batch) < self._max_batch and size < self._max_bytes:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
            size += item.size
        return batch, False

    async def _run(self) -> None:
        assert self._queue is not None
        try:
            stop = False
            while not stop:
                first = await self._queue.get()
                if first is _STOP:
                    break
                batch, stop = self._take_batch(first)
                await self._apply_and_resolve(batch)
        finally:
            self._fail_pending(WriterStoppedError("the SessionDB writer stopped before this write was applied"))

    async def _apply_live(self, batch: list[_Item]) -> tuple[list[_Item], list[Any]] | None:
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
            self._latencies.append((time.perf_counter() - started) * 1000.0)
            return live, outcomes
        return None  # pragma: no cover (the loop returns or raises)

    async def _apply_and_resolve(self, batch: list[_Item]) -> None:
        try:
            applied = await self._apply_live(batch)
        except asyncio.CancelledError:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(
                        WriterStoppedError(
                            "the SessionDB writer was cancelled while applying this write; it may or may "
                            "not have committed (close the store before the event loop shuts down)"
                        )
                    )
            raise
        except Exception as exc:
            for item in batch:
                if not item.future.done():
                    self.failed += 1
                    item.future.set_exception(exc)
            self._maybe_log()
            return
        if applied is None:
            return
        live, outcomes = applied
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
        self._maybe_log()

    def _fail_pending(self, exc: Exception) -> None:
        if self._queue is None:
            return
        while True:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if item is not _STOP and not item.future.done():
                item.future.set_exception(exc)
