"""LangChain chat history on a borrowed ``SessionDB`` (extra ``[langchain]``).

``HermesChatMessageHistory`` is a ``BaseChatMessageHistory``: the async
methods (``aget_messages``, ``aadd_messages``, ``aclear``) go straight to the
store; the sync ones (``messages``, ``add_messages``, ``clear``) run the same
coroutines on the store's own loop thread (or ``loop=``), which plain
synchronous code does not need to provide and which stops when the store
closes. Each message is one
row: readable text in ``content``, OpenAI-shaped ``tool_calls`` and
``tool_call_id``, and the whole message (ids, metadata, tool calls) under
``display_metadata`` so it reads back equal.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import StoreClosedError
from ._binding import SessionBinding, exact_payload, parts_text
from .loop_thread import run_on_loop, store_loop

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        FunctionMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "hermes_state.integrations.langchain needs langchain-core: pip install 'hermes-state[langchain]'"
    ) from exc

__all__ = ["MESSAGE_KEY", "HermesChatMessageHistory", "message_to_row", "row_to_message"]

# The display_metadata key that holds ``message_to_dict(message)``.
MESSAGE_KEY = "langchain_message"

T = TypeVar("T")


class HermesChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept in a hermes-state ``SessionDB`` session.

    The store is borrowed and never closed here. The synchronous methods run
    the coroutines on an event loop in another thread: ``loop`` if given (e.g.
    a :class:`~hermes_state.integrations.loop_thread.LoopThread`), else the
    store's own loop thread
    (:func:`~hermes_state.integrations.loop_thread.store_loop`), which stops
    when the store is closed
    (:func:`~hermes_state.integrations.loop_thread.close_store` closes it
    from synchronous code; an open store is closed at the interpreter's
    exit). Called on the store's own loop thread, or inside a running loop
    before the store has one, they raise ``RuntimeError`` instead of
    blocking it: await the async methods there.
    """

    def __init__(
        self,
        session_id: str,
        session_db: Any,
        *,
        source: str = "langchain",
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__()
        self._binding = SessionBinding(session_db, session_id, source)
        self.session_id: str = self._binding.session_id
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop or None, not {type(loop).__name__}")
        self._loop = loop

    def __repr__(self) -> str:
        return f"<HermesChatMessageHistory {self.session_id!r} on {self._binding.db!r}>"

    # ------------------------------------------------------------------ async

    async def aget_messages(self) -> list[BaseMessage]:
        """Return the session's messages, oldest first."""
        return [row_to_message(row) for row in await self._binding.rows()]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in order, in one transaction; returns after the commit."""
        await self._binding.append(_rows_for(messages))

    async def aclear(self) -> None:
        """Delete every message of the session (the session row stays). Returns None."""
        await self._binding.db.clear_messages(self.session_id)

    # ------------------------------------------------------------------- sync

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The session's messages, oldest first (blocks until read)."""
        return self._run(self.aget_messages(), "messages", "aget_messages")

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` in one transaction; returns after the commit."""
        rows = _rows_for(messages)  # bad input fails here, in the caller's thread
        self._run(self._binding.append(rows), "add_messages", "aadd_messages")

    def add_message(self, message: BaseMessage) -> None:
        """Append one message; returns after the commit."""
        self.add_messages([message])

    def clear(self) -> None:
        """Delete every message of the session; returns after the commit."""
        self._run(self.aclear(), "clear", "aclear")

    def _run(self, coro: Coroutine[Any, Any, T], name: str, async_name: str) -> T:
        db = self._binding.db
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = db.loop or self._loop
        if db.closed or (running is not None and (loop is None or loop is running)):
            coro.close()
            if db.closed:
                raise StoreClosedError()
            where = "the event loop the store runs on" if loop is running else "a running event loop"
            raise RuntimeError(
                f"HermesChatMessageHistory.{name} is synchronous and was called on {where}, which it would "
                f"block (a deadlock); use `await history.{async_name}(...)` there"
            )
        # The host's loop thread if it gave one; else the store's own loop thread,
        # which never stops under a call (a host loop elsewhere might).
        target = self._loop if self._loop is not None and self._loop.is_running() else store_loop(db)
        return run_on_loop(target, coro)


_ROLES: tuple[tuple[type[BaseMessage], str], ...] = (
    (HumanMessage, "user"),
    (AIMessage, "assistant"),
    (SystemMessage, "system"),
    (ToolMessage, "tool"),
    (FunctionMessage, "tool"),
)


def _rows_for(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a sequence of BaseMessage, not {type(messages).__name__}")
    rows = []
    for index, message in enumerate(messages):
        try:
            rows.append(message_to_row(message))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"messages[{index}]: {exc}") from None
    return rows


def message_to_row(message: Any) -> dict[str, Any]:
    """The message dict stored for one LangChain message.

    Raises ``TypeError`` for anything that is not a ``BaseMessage`` or whose
    fields JSON cannot encode.
    """
    if not isinstance(message, BaseMessage):
        raise TypeError(f"a message must be a langchain BaseMessage, not {type(message).__name__}")
    exact = message_to_dict(message)
    try:
        json.dumps(exact)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"message cannot be stored as JSON: {exc}") from None
    role = message.role if isinstance(message, ChatMessage) else next(
        (name for kind, name in _ROLES if isinstance(message, kind)), message.type
    )
    row: dict[str, Any] = {"role": role, "content": parts_text(message.content), "display_metadata": {MESSAGE_KEY: exact}}
    if isinstance(message, AIMessage) and message.tool_calls:
        row["tool_calls"] = [
            {"id": call.get("id"), "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["args"], ensure_ascii=False)}}
            for call in message.tool_calls
        ]
    if isinstance(message, ToolMessage):
        row["tool_call_id"] = message.tool_call_id
    if isinstance(message, (ToolMessage, FunctionMessage)) and isinstance(message.name, str):
        row["tool_name"] = message.name
    return row


def row_to_message(row: Mapping[str, Any]) -> BaseMessage:
    """The LangChain message of a stored row: the exact message for rows this adapter wrote.

    A row another writer appended becomes the matching plain message
    (``HumanMessage``, ``AIMessage`` with its tool calls, ``SystemMessage``,
    ``ToolMessage``, else a ``ChatMessage`` with the row's role).
    """
    exact = exact_payload(row, MESSAGE_KEY)
    if exact is not None:
        return messages_from_dict([exact])[0]
    role, text = row.get("role"), parts_text(row.get("content"))
    if role == "user":
        return HumanMessage(content=text)
    if role == "assistant":
        calls = []
        for call in row.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            function = call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}")
            except ValueError:
                args = {}
            calls.append({"name": function.get("name") or "", "args": args if isinstance(args, dict) else {},
                          "id": call.get("id")})
        return AIMessage(content=text, tool_calls=calls)
    if role == "system":
        return SystemMessage(content=text)
    if role == "tool":
        return ToolMessage(content=text, tool_call_id=row.get("tool_call_id") or "", name=row.get("tool_name"))
    return ChatMessage(content=text, role=str(role))
