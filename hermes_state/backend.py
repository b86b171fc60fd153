"""The contract between the ``SessionDB`` facade and a storage backend.

A backend owns its connections. Writes reach it only as batches of commands
from the actor (``apply_batch``); reads go straight to its ``reader``. The
SQLite and PostgreSQL stores are the same facade built on different backends.

Optional hooks the facade looks for (a backend without one has nothing to
refuse): ``command_refusal(command)``, an error for a value this backend
cannot store, and ``write_refusal()``, an error every write raises before it
is queued (SQLite: the file is known to be damaged), and
``start_batch(commands, report)``, which does what ``apply_batch`` does but
calls ``report(outcomes, None)`` or ``report(None, error)`` on the event
loop when done, so the actor resolves futures without a task in between.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from .commands.base import Command

__all__ = ["Backend", "Reader", "Outcome", "Report"]

# (True, result) or (False, exception) per command, in batch order.
Outcome = tuple[bool, Any]
# What ``start_batch`` calls on the event loop: (outcomes, None) after the
# batch committed, (None, error) when the batch as a whole raised.
Report = Callable[[list[Outcome] | None, BaseException | None], None]


class Reader(Protocol):
    """Named read queries; never blocked by the write queue.

    Each backend registers one implementation per query name (the SQLite ones
    live in ``hermes_state.sqlite.queries``); the facade calls them by name.
    """

    async def query(self, name: str, *args: Any) -> Any:
        """Run the query called ``name`` and return its result."""


class Backend(Protocol):
    """Connections, schema and transactions for one database."""

    read_only: bool

    @property
    def reader(self) -> Reader:
        """The backend's read side."""

    async def open(self) -> None:
        """Connect and create or migrate the schema (writable) or check it (read-only)."""

    async def apply_batch(self, commands: Sequence[Command]) -> list[Outcome]:
        """Apply commands in one transaction, each isolated; raises if the transaction cannot commit."""

    def is_busy_error(self, exc: BaseException) -> bool:
        """True when ``exc`` means another connection holds the write lock (worth a retry)."""

    def readonly_error(self) -> Exception:
        """The exception a write on a read-only store raises."""

    async def storage_info(self) -> dict[str, Any]:
        """Facts about the open database (driver, versions, journal mode)."""

    async def close(self) -> None:
        """Close every connection; safe to call more than once."""
