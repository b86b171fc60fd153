"""The actor's ``start_batch`` path (SQLite): batches chained from their reports, with the old guarantees.

The faults are injected in front of the real backend's ``start_batch``; every
batch that is applied goes to the real file.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import pytest

from hermes_state import SessionDB
from hermes_state.backend import Report
from hermes_state.errors import WriteNotAppliedError

pytestmark = pytest.mark.backends("sqlite")


def _wrap_start(store: SessionDB, fault: Any) -> list[int]:
    """Route the actor's batches through ``fault(n, commands, report, real)``; returns the batch sizes seen."""
    real = store._backend.start_batch  # type: ignore[attr-defined]
    sizes: list[int] = []

    def start(commands: Sequence[Any], report: Report) -> None:
        sizes.append(len(commands))
        fault(len(sizes), commands, report, real)

    store._actor._start = start
    return sizes


async def test_batch_known_not_applied_is_retried_once(store: SessionDB) -> None:
    await store.create_session("s", "cli")

    def lose_first(n: int, commands: Sequence[Any], report: Report, real: Any) -> None:
        if n == 1:
            asyncio.get_running_loop().call_soon(report, None, WriteNotAppliedError("connection lost before COMMIT"))
        else:
            real(commands, report)

    sizes = _wrap_start(store, lose_first)
    row_id = await store.append_message("s", "user", "survives")
    assert sizes == [1, 1] and store._actor.retried_batches == 1
    assert [r["id"] for r in await store.get_messages("s")] == [row_id]


async def test_batch_lost_twice_fails_its_callers_and_the_writer_lives_on(store: SessionDB) -> None:
    await store.create_session("s", "cli")

    def lose_two(n: int, commands: Sequence[Any], report: Report, real: Any) -> None:
        if n <= 2:
            asyncio.get_running_loop().call_soon(report, None, WriteNotAppliedError("lost again"))
        else:
            real(commands, report)

    _wrap_start(store, lose_two)
    with pytest.raises(WriteNotAppliedError, match="lost again"):
        await store.append_message("s", "user", "lost")
    assert await store.get_messages("s") == []
    assert store._actor.running
    await store.append_message("s", "user", "after")
    assert [r["content"] for r in await store.get_messages("s")] == ["after"]


async def test_start_that_raises_fails_that_batch_only(store: SessionDB) -> None:
    await store.create_session("s", "cli")

    def refuse_first(n: int, commands: Sequence[Any], report: Report, real: Any) -> None:
        if n == 1:
            raise OSError("refused before anything started")
        real(commands, report)

    _wrap_start(store, refuse_first)
    with pytest.raises(OSError, match="refused before"):
        await store.append_message("s", "user", "refused")
    assert store._actor.failed == 1 and store._actor.running
    ids = await asyncio.gather(*(store.append_message("s", "user", f"m{i}") for i in range(20)))
    assert [r["id"] for r in await store.get_messages("s")] == ids


async def test_callers_queued_during_a_batch_go_in_the_next_one_from_its_report(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    held: list[tuple[Sequence[Any], Report]] = []

    def hold_first(n: int, commands: Sequence[Any], report: Report, real: Any) -> None:
        if n == 1:
            held.append((commands, report))  # started later, once the others are queued
        else:
            real(commands, report)

    sizes = _wrap_start(store, hold_first)
    first = asyncio.ensure_future(store.append_message("s", "user", "first"))
    while not held:
        await asyncio.sleep(0)
    rest = [asyncio.ensure_future(store.append_message("s", "user", f"r{i}")) for i in range(30)]
    await asyncio.sleep(0)
    assert store._actor._queue.qsize() == 30
    store._backend.start_batch(*held[0])  # type: ignore[attr-defined]
    ids = [await first, *await asyncio.gather(*rest)]
    assert sizes == [1, 30]  # the 30 went as one batch, taken by the first batch's report
    assert [r["content"] for r in await store.get_messages("s")] == ["first"] + [f"r{i}" for i in range(30)]
    assert [r["id"] for r in await store.get_messages("s")] == ids
