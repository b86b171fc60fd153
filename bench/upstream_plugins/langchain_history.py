"""pytest plugin: langchain-core's tests get ``HermesChatMessageHistory`` where they build ``InMemoryChatMessageHistory``.

Loaded with ``-p langchain_history`` by ``bench/upstream_suite.py`` before
any test module is imported. :func:`StoreBackedHistory` takes the in-memory
class's ``messages=`` and returns a history on a ``SessionDB`` in a
temporary directory of its own, so the tests' assertions (equality of
``.messages``, ``RunnableWithMessageHistory`` round trips, sync and async)
run against the store.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import langchain_core.chat_history

from hermes_state import SessionDB
from hermes_state.integrations.langchain import HermesChatMessageHistory

_dirs: list[tempfile.TemporaryDirectory] = []


class StoreBackedHistory(HermesChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=[...])`` on a fresh hermes-state store."""

    def __init__(self, messages: Sequence[Any] | None = None, **_: Any) -> None:
        tmp = tempfile.TemporaryDirectory(prefix="hs-langchain-")
        _dirs.append(tmp)
        super().__init__(f"lc-{uuid.uuid4().hex}", SessionDB(Path(tmp.name) / "state.db"))
        if messages:
            self.add_messages(list(messages))

    # The in-memory class is a pydantic model: two histories are equal when their messages are.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreBackedHistory):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]


def pytest_configure(config: Any) -> None:
    langchain_core.chat_history.InMemoryChatMessageHistory = StoreBackedHistory  # type: ignore[misc]
