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


def _root() -> Path:
    """The directory every history's store file goes in, made once at configure time (never on a loop)."""
    if not _dirs:
        _dirs.append(tempfile.TemporaryDirectory(prefix="hs-langchain-"))
    return Path(_dirs[0].name)


class StoreBackedHistory(HermesChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=[...])`` on a fresh hermes-state store."""

    def __init__(self, messages: Sequence[Any] | None = None, **_: Any) -> None:
        # The tests build histories on a running loop: no I/O here (the store opens at first use).
        name = uuid.uuid4().hex
        super().__init__(f"lc-{name}", SessionDB(_root() / f"{name}.db"))
        if messages:
            self.add_messages(list(messages))

    # The in-memory class is a pydantic model: two histories are equal when their messages are.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StoreBackedHistory):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]


def pytest_configure(config: Any) -> None:
    _root()
    langchain_core.chat_history.InMemoryChatMessageHistory = StoreBackedHistory  # type: ignore[misc]
