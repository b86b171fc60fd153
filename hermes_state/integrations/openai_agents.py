"""OpenAI Agents SDK session on a borrowed ``SessionDB`` (extra ``[openai-agents]``).

``HermesSession`` implements the SDK's ``Session`` protocol, so
``Runner.run(agent, text, session=HermesSession("chat-1", db))`` keeps the
conversation in the store: every item becomes one message row (readable text
in ``content``, the exact item in ``display_metadata``), all sessions of a
store share its single writer, and the transcript is searchable with
``db.search_messages``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._binding import SessionBinding, exact_payload, parts_text

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "hermes_state.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'hermes-state[openai-agents]'"
    ) from exc

__all__ = ["ITEM_KEY", "HermesSession", "item_to_message", "message_to_item"]

# The display_metadata key that holds the SDK item exactly as it was added.
ITEM_KEY = "openai_agents_item"

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")


class HermesSession:
    """An Agents SDK session whose items live in a hermes-state ``SessionDB``.

    The store is borrowed: many sessions (and other users) share it and its
    writer, and closing it stays the host's job. The session row is created
    (source ``source``) before the first append.
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        session_db: Any,
        *,
        source: str = "openai-agents",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self._binding = SessionBinding(session_db, session_id, source)
        self.session_id: str = self._binding.session_id
        # A dict is accepted as by the SDK's own sessions; unknown keys raise TypeError.
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )

    def __repr__(self) -> str:
        return f"<HermesSession {self.session_id!r} on {self._binding.db!r}>"

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Return the session's items oldest first; with ``limit``, only the newest ``limit`` items.

        Without ``limit`` the ``session_settings.limit`` applies. Rows other
        writers appended to the same session read back as plain messages.
        """
        effective = resolve_session_limit(limit, self.session_settings)
        return [message_to_item(row) for row in await self._binding.rows(effective)]

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in order, all in one transaction; returns after the commit."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TypeError(f"items must be a list of item dicts, not {type(items).__name__}")
        rows = []
        for index, item in enumerate(items):
            try:
                rows.append(item_to_message(item))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"items[{index}]: {exc}") from None
        await self._binding.append(rows)

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it, or None when the session is empty."""
        row = await self._binding.db.pop_message(self.session_id)
        return None if row is None else message_to_item(row)

    async def clear_session(self) -> None:
        """Delete every item of the session (the session row itself stays). Returns None."""
        await self._binding.db.clear_messages(self.session_id)


def item_to_message(item: Any) -> dict[str, Any]:
    """The message dict stored for one SDK input item.

    Raises ``TypeError`` for an item that is not a dict or that JSON cannot encode.
    """
    if not isinstance(item, Mapping):
        raise TypeError(f"an item must be a dict, not {type(item).__name__}")
    try:
        as_json = json.dumps(item, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"item cannot be stored as JSON: {exc}") from None
    kind = item.get("type")
    role = item.get("role")
    message: dict[str, Any] = {"display_metadata": {ITEM_KEY: item}}
    if kind in (None, "message") and isinstance(role, str):
        message.update(role=role, content=parts_text(item.get("content")))
    elif kind == "function_call":
        name, arguments, call_id = item.get("name"), item.get("arguments"), item.get("call_id")
        message.update(role="assistant", content=f"{name}({arguments or ''})", tool_name=_text_or_none(name))
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ]
    elif kind == "reasoning":
        summary = parts_text(item.get("summary"))
        message.update(role="assistant", content=summary or parts_text(item.get("content")))
    elif isinstance(kind, str) and kind.endswith("_output"):
        output = item.get("output")
        message.update(role="tool", content=parts_text(output) if output is not None else "")
        message["tool_call_id"] = _text_or_none(item.get("call_id"))
    else:
        name = item.get("name")
        message.update(role="assistant", content=as_json, tool_name=_text_or_none(name))
    return message


def message_to_item(row: Mapping[str, Any]) -> Any:
    """The SDK item of a stored row: the exact item for rows this adapter wrote.

    A row another writer appended becomes an input message: ``tool`` rows a
    ``function_call_output`` for their call id, other roles a plain
    ``{"role", "content"}`` message.
    """
    exact = exact_payload(row, ITEM_KEY)
    if exact is not None:
        return exact
    role = row.get("role")
    content = row.get("content")
    if role == "tool" and row.get("tool_call_id"):
        return {"type": "function_call_output", "call_id": row["tool_call_id"], "output": parts_text(content)}
    return {"role": role if role in _MESSAGE_ROLES else "assistant", "content": parts_text(content)}


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
