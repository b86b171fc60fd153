"""The write workload of ``bench/append.py`` and ``bench/append_postgres.py``: texts, shapes, drivers.

Both benchmarks write the same seeded texts in the same shapes, so this
module is the one place those live (neither benchmark imports the other).
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
from pathlib import Path
from typing import Any, Callable

__all__ = ["ROLE", "SEED", "Workload", "make_texts", "run_async_contender", "shape_items"]

_VOCAB = (
    "the a an of to in and or but if then else when while for with without about agent model tool "
    "call result error retry session message user assistant system prompt token context window "
    "summary compress search index query table row column commit write read file path directory "
    "branch merge test build deploy server client request response stream chunk json yaml config "
    "value key list dict string number true false null none parse format render output input "
    "please could you would should can will may might must check fix update add remove rename "
    "explain show find run open close start stop wait done ok thanks sure here is are was were "
    "this that these those it its we our they their he she his her what why how where which who "
    "database sqlite postgres cache memory disk latency throughput benchmark async await task lock "
    "queue worker actor batch group transaction durable fsync journal wal checkpoint vacuum schema "
    "migration version upgrade downgrade legacy current next previous first last new old small large "
    "quick slow fast simple complex clear obvious subtle strange broken working failing passing "
    "function class method module package import export return raise except finally yield lambda"
).split()

SEED = 20240611
ROLE = ("user", "assistant")


def make_texts(n: int, seed: int) -> list[str]:
    """``n`` texts of 40-400 characters of words from a fixed vocabulary (seeded)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        target = rng.randint(40, 400)
        words: list[str] = []
        length = -1
        while length < target:
            w = rng.choice(_VOCAB)
            words.append(w)
            length += len(w) + 1
        text = " ".join(words)
        if len(text) > 400:
            text = text[:400].rstrip()
        out.append(text)
    return out


class Workload:
    """Counts and texts shared by every contender."""

    def __init__(self, scale: float) -> None:
        self.tasks = 50
        self.per_task = max(1, round(200 * scale))
        self.single = max(1, round(5000 * scale))
        self.batch = max(1, round(10000 * scale))
        self.texts_a = [make_texts(self.per_task, SEED + 1000 + t) for t in range(self.tasks)]
        self.texts_b = make_texts(self.single, SEED + 2)
        self.texts_c = make_texts(self.batch, SEED + 3)

    @property
    def rows_a(self) -> int:
        return self.tasks * self.per_task

    def sid_a(self, t: int) -> str:
        return f"a-{t:03d}"

    def interleaved_a(self) -> list[tuple[str, int, str]]:
        """(session, index, text) in round-robin order, as concurrent tasks would write them."""
        return [(self.sid_a(t), i, self.texts_a[t][i]) for i in range(self.per_task) for t in range(self.tasks)]


def shape_items(w: Workload, shape: str) -> tuple[list[str], list[tuple[str, int, str]]]:
    """The sessions and (session, index, text) rows of a write shape, in the order the store writes them."""
    if shape == "a":
        return [w.sid_a(t) for t in range(w.tasks)], w.interleaved_a()
    texts = w.texts_b if shape == "b" else w.texts_c
    return [shape], [(shape, i, x) for i, x in enumerate(texts)]


# --------------------------------------------------------------------------- shared async drivers

async def _shape_a(db: Any, w: Workload) -> float:
    async def task(t: int) -> None:
        sid = w.sid_a(t)
        for i, text in enumerate(w.texts_a[t]):
            await db.append_message(sid, ROLE[i % 2], text)

    t0 = time.perf_counter()
    await asyncio.gather(*(task(t) for t in range(w.tasks)))
    return time.perf_counter() - t0


async def _shape_b(db: Any, w: Workload) -> float:
    t0 = time.perf_counter()
    for i, text in enumerate(w.texts_b):
        await db.append_message("b", ROLE[i % 2], text)
    return time.perf_counter() - t0


async def _shape_c(db: Any, w: Workload) -> float:
    t0 = time.perf_counter()
    batch = [{"role": ROLE[i % 2], "content": x} for i, x in enumerate(w.texts_c)]
    n = await db.append_messages_batch("c", batch)
    dt = time.perf_counter() - t0
    if n != w.batch:
        raise AssertionError(f"append_messages_batch returned {n}, expected {w.batch}")
    return dt


async def _shape_d(db: Any, w: Workload) -> float:
    await db.get_messages("c")  # untimed: both reads below run on a warm connection
    t0 = time.perf_counter()
    msgs = await db.get_messages("c")
    dt = time.perf_counter() - t0
    if len(msgs) != w.batch:
        raise AssertionError(f"get_messages returned {len(msgs)} rows, expected {w.batch}")
    return dt


async def run_async_contender(
    name: str, opener: Callable[[Path], Any], create: Callable[[Any, str], Any], w: Workload, d: Path,
    errors: dict[str, str], keys: str = "abc",
) -> dict[str, float]:
    """Run (a), (b), (c)+(d) (those in ``keys``) each on a fresh file; a failing shape is recorded, the rest still run."""
    res: dict[str, float] = {}
    plan = [
        ("a", [w.sid_a(t) for t in range(w.tasks)], [_shape_a]),
        ("b", ["b"], [_shape_b]),
        ("c", ["c"], [_shape_c, _shape_d]),
    ]
    for key, sessions, shapes in plan:
        if key not in keys:
            continue
        db = None
        try:
            db = await opener(d / f"{name}-{key}.db")
            for sid in sessions:  # untimed; also makes sure the store is fully open
                await create(db, sid)
            for shape in shapes:
                label = shape.__name__[-1]
                try:
                    res[label] = await shape(db, w)
                except Exception:
                    errors[f"{name}:{label}"] = traceback.format_exc()
                    break
        except Exception:
            errors[f"{name}:{key}"] = traceback.format_exc()
        finally:
            if db is not None:
                try:
                    await db.close()
                except Exception:
                    errors[f"{name}:{key}:close"] = traceback.format_exc()
    return res
