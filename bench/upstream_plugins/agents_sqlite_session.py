"""pytest plugin: the Agents SDK's tests get ``HermesSession`` where they build ``agents.SQLiteSession``.

Loaded with ``-p agents_sqlite_session`` by ``bench/upstream_suite.py``
before any test module is imported, so ``from agents import SQLiteSession``
in the SDK's tests picks up :class:`StoreBackedSQLiteSession`: the SDK's
constructor signature (``db_path`` may be ``":memory:"``: a temporary file
then) and its synchronous ``close()``, over a ``SessionDB`` of its own.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import agents
import agents.memory

from hermes_state import SessionDB
from hermes_state.integrations.loop_thread import close_store
from hermes_state.integrations.openai_agents import HermesSession


class StoreBackedSQLiteSession(HermesSession):
    """``SQLiteSession(session_id, db_path, sessions_table, messages_table, session_settings)`` on hermes-state."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        if str(db_path) == ":memory:":
            self._tmp = tempfile.TemporaryDirectory(prefix="hs-agents-")
            db_path = Path(self._tmp.name) / "state.db"
        self.db_path = Path(db_path)
        self.sessions_table = sessions_table
        self.messages_table = messages_table
        self.db = SessionDB(self.db_path)
        super().__init__(session_id, self.db, session_settings=session_settings)

    def close(self) -> None:
        """Close the store: from a coroutine on the store's loop, as a task (a sync call must not block it)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and self.db.loop is running:
            running.create_task(self.db.close())
        else:
            close_store(self.db)


def pytest_configure(config: Any) -> None:
    agents.SQLiteSession = StoreBackedSQLiteSession
    agents.memory.SQLiteSession = StoreBackedSQLiteSession
