"""The usage chart's geometry: stacked bars per day, one colour per model, computed on the server.

The page draws it as inline SVG from a template (autoescaped like the rest),
so the chart needs no script and no library, and model names stay text.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Chart", "METRICS", "day_chart", "nice_ceiling"]

WIDTH, HEIGHT = 800, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 8, 12, 28
SERIES = 8  # colours in the stylesheet; past that, the smallest models share "other"
OTHER = "other models"

METRICS: dict[str, tuple[str, Callable[[Mapping[str, Any]], float]]] = {
    "cost": ("estimated cost (USD)", lambda row: float(row.get("estimated_cost_usd") or 0.0)),
    "tokens": ("tokens (input + output)", lambda row: float((row.get("input_tokens") or 0) + (row.get("output_tokens") or 0))),
}


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: int
    label: str


@dataclass
class Chart:
    metric: str
    title: str
    width: int = WIDTH
    height: int = HEIGHT
    bars: list[Bar] = field(default_factory=list)
    x_labels: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)
    legend: list[tuple[int, str]] = field(default_factory=list)
    baseline: float = HEIGHT - BOTTOM
    left: int = LEFT
    right: int = WIDTH - RIGHT


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``value`` (1 for nothing)."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)


def _tick_label(value: float, metric: str) -> str:
    if metric == "cost":
        return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def _days(first: str, last: str) -> list[str]:
    start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(start + dt.timedelta(days=n)).isoformat() for n in range((end - start).days + 1)]


def day_chart(rows: Sequence[Mapping[str, Any]], metric: str) -> Chart:
    """Stacked bars of ``metric`` per day (every day between the first and the last, empty ones too)."""
    title, value_of = METRICS[metric]
    chart = Chart(metric=metric, title=title)
    if not rows:
        return chart
    totals: dict[str, float] = {}
    for row in rows:
        totals[row["model"]] = totals.get(row["model"], 0.0) + value_of(row)
    ranked = sorted(totals, key=lambda model: (-totals[model], model))
    named = ranked if len(ranked) <= SERIES else ranked[: SERIES - 1]
    series = {model: i for i, model in enumerate(named)}
    other = len(named) if len(ranked) > len(named) else None
    chart.legend = [(i, model) for model, i in series.items()] + ([(other, OTHER)] if other is not None else [])
    days = _days(min(r["day"] for r in rows), max(r["day"] for r in rows))
    stacks: dict[str, dict[int, float]] = {day: {} for day in days}
    for row in rows:
        index = series.get(row["model"], other if other is not None else 0)
        stack = stacks[row["day"]]
        stack[index] = stack.get(index, 0.0) + value_of(row)
    top = nice_ceiling(max(sum(stack.values()) for stack in stacks.values()))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / len(days)
    bar_w = max(1.0, slot * 0.8)
    label_every = max(1, math.ceil(len(days) / 10))
    for n, day in enumerate(days):
        x = LEFT + n * slot + (slot - bar_w) / 2
        y = float(chart.baseline)
        for index in sorted(stacks[day]):
            value = stacks[day][index]
            height = plot_h * value / top
            if height <= 0:
                continue
            y -= height
            name = OTHER if index == other else named[index]
            chart.bars.append(Bar(x, y, bar_w, height, index, f"{day} {name}: {_tick_label(value, metric)}"))
        if n % label_every == 0:
            chart.x_labels.append((LEFT + n * slot + slot / 2, day[5:]))
    chart.y_ticks = [(chart.baseline - plot_h * k / 4, _tick_label(top * k / 4, metric)) for k in range(5)]
    return chart
