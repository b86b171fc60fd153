"""The trace of a transcript page: turns (a user message and what followed), tool results under their calls, times and tokens.

Built from the page's :class:`~.views.MessageView` rows, so it shows what the
page holds. A turn's tokens are the rows' ``token_count`` where the agent
recorded one; its cost is an estimate: the session's estimated cost shared
out by tokens (the store keeps cost per session and model, not per message).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Step", "Turn", "turns", "turn_costs", "PREVIEW_CHARS"]

PREVIEW_CHARS = 160


def _preview(view: Any) -> str:
    for block in view.blocks:
        if block.text and block.kind in ("markdown", "code", "json", "text"):
            text = " ".join(block.text[: PREVIEW_CHARS * 2].split())
            return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."
    return ""


@dataclass
class Step:
    """One row of a turn; a call's results hang under it in ``results``."""

    view: Any
    preview: str
    gap: float | None  # seconds since the row before it
    results: dict[str, Step] = field(default_factory=dict)  # by tool call id


@dataclass
class Turn:
    start: Any  # the user message that opened it (None for rows before the first one)
    steps: list[Step] = field(default_factory=list)
    tokens: int = 0
    calls: int = 0
    errors: int = 0
    seconds: float | None = None
    cost: float | None = None

    @property
    def anchor(self) -> str:
        """The anchor of the turn's first row."""
        return self.start.anchor if self.start is not None else (self.steps[0].view.anchor if self.steps else "")


def _gap(view: Any, previous: Any) -> float | None:
    if previous is None or view.timestamp is None or previous.timestamp is None:
        return None
    return max(0.0, view.timestamp - previous.timestamp)


def turns(views: Sequence[Any]) -> list[Turn]:
    """The page's rows grouped into turns; a tool result sits under the call it answers (when that call is in the turn)."""
    out: list[Turn] = []
    calls: dict[str, Step] = {}
    previous = None
    for view in views:
        if view.role == "user" or not out:
            out.append(Turn(start=view if view.role == "user" else None))
            calls = {}
        turn = out[-1]
        step = Step(view, _preview(view), _gap(view, previous))
        turn.tokens += view.token_count or 0
        turn.errors += int(view.error)
        if view.role == "tool" and view.tool_call_id in calls and view.tool_call_id not in calls[view.tool_call_id].results:
            calls[view.tool_call_id].results[view.tool_call_id] = step
        elif view is not turn.start:
            turn.steps.append(step)
        for call in view.tool_calls:
            turn.calls += 1
            if call.call_id:
                calls[call.call_id] = step
        previous = view
    for turn in out:
        first = turn.start or (turn.steps[0].view if turn.steps else None)
        stamps = [v.timestamp for v in _rows(turn) if v.timestamp is not None]
        if first is not None and len(stamps) > 1:
            turn.seconds = max(stamps) - min(stamps)
    return out


def _rows(turn: Turn) -> list[Any]:
    rows = [turn.start] if turn.start is not None else []
    for step in turn.steps:
        rows.append(step.view)
        rows.extend(result.view for result in step.results.values())
    return rows


def turn_costs(out: list[Turn], session: dict[str, Any]) -> None:
    """Each turn's share of the session's estimated cost by tokens (left None when the session has no tokens or cost)."""
    cost = session.get("estimated_cost_usd") or 0.0
    tokens = (session.get("input_tokens") or 0) + (session.get("output_tokens") or 0)
    if not cost or not tokens:
        return
    for turn in out:
        if turn.tokens:
            turn.cost = cost * min(turn.tokens, tokens) / tokens
