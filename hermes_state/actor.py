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
from typing import Any, Awaitable, Callable, Sequence

from .backend import Outcome
from .commands.base import Command

__all__ = ["WriterActor", "WriterStoppedError"]

log = logging.getLogger("hermes_state.actor")

ApplyBatch = Callable[[Sequence[Command]], Awaitable[list[Outcome]]]

MAX_BATCH_COMMANDS = 1024
MAX_BATCH_BYTES = 16 * 1024 * 1024
QUEUE_LIMIT = 8192


class WriterStoppedError(RuntimeError):
    """The writer task is gone; the command was not applied."""


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

    async def _apply_and_resolve(self, batch: list[_Item]) -> None:
        live = [item for item in batch if not item.future.done()]
        if not live:
            return
        try:
            # Shielded: the transaction runs on the connection thread and
            # finishes regardless; cancelling this task must not orphan futures.
            outcomes = await asyncio.shield(self._apply([item.command for item in live]))
        except asyncio.CancelledError:
            for item in live:
                if not item.future.done():
                    item.future.set_exception(
                        WriterStoppedError(
                            "the SessionDB writer was cancelled while applying this write; it may or may "
                            "not have committed (close the store before the event loop shuts down)"
                        )
                    )
            raise
        except Exception as exc:
            for item in live:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        self.batches += 1
        self.commands += len(live)
        for item, (ok, value) in zip(live, outcomes):
            if item.future.done():
                continue
            if ok:
                item.future.set_result(value)
            else:
                item.future.set_exception(value)

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
