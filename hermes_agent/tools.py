"""Tools the loop can call: a schema, an async handler and whether calls may run in parallel."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .agent import AIAgent

__all__ = ["Tool", "ToolContext", "tool"]

Handler = Callable[[dict[str, Any], "ToolContext"], Awaitable[Any]]


@dataclass
class ToolContext:
    """What a handler may know about the call: the agent, its session and the call id."""

    agent: AIAgent
    session_id: str
    tool_call_id: str

    async def session_db(self) -> Any:
        """Return the agent's store, opening ``$HERMES_HOME/state.db`` (agent-owned) when it has none.

        Returns None when the agent never persists (``persist_disabled``).
        """
        return await self.agent._get_session_db_for_recall()


@dataclass(frozen=True)
class Tool:
    """One callable tool.

    ``handler(arguments, context)`` is a coroutine function; a non-str result is
    JSON-encoded. Consecutive ``parallel_safe`` calls of one batch run
    concurrently; any other call runs alone, in the model's order.
    ``available`` (when given) decides whether the tool is offered at all.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    parallel_safe: bool = False
    available: Callable[[], bool] | None = None

    def schema(self) -> dict[str, Any]:
        """Return the OpenAI function-tool schema."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def is_available(self) -> bool:
        """Return whether the tool should be offered (its ``available`` check, default True)."""
        if self.available is None:
            return True
        try:
            return bool(self.available())
        except Exception:
            return False


def tool(
    name: str | None = None,
    *,
    description: str = "",
    parameters: dict[str, Any] | None = None,
    parallel_safe: bool = False,
) -> Callable[[Handler], Tool]:
    """Decorator turning ``async def handler(arguments, context)`` into a :class:`Tool`."""

    def wrap(handler: Handler) -> Tool:
        return Tool(
            name=name or handler.__name__,
            description=description or (handler.__doc__ or "").strip(),
            parameters=parameters or {"type": "object", "properties": {}},
            handler=handler,
            parallel_safe=parallel_safe,
        )

    return wrap


def render_result(value: Any) -> str:
    """Return a tool result as text (str unchanged, anything else as JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
