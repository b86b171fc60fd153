"""Batches and order for writing into a store: the budget, parents first, and the format-1 session writer.

:class:`Budget` bounds every batch a command writes (``--batch-*``);
:func:`parents_first` orders sessions so a child's link finds its parent.

:class:`SessionWriter` imports what earlier releases exported (format 1,
one ``export_session``-shaped object per line) and the JSON the API's
exports return, in ``import_sessions`` calls that stay inside the API's
limits. Each call is all or nothing and skips ids that already exist, so
running it again after an interruption never duplicates a session. A
session too large for one call is imported with its first messages and the
rest appended in chunks; on a re-run the writer appends only what the
destination is still missing. (Format 2 goes through :mod:`.rows`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import msgspec

from ..methods.maintenance import IMPORT_MAX_MESSAGES_PER_SESSION, IMPORT_MAX_SESSION_BYTES, IMPORT_MAX_SESSIONS
from .errors import CliError

__all__ = ["SessionWriter", "parents_first", "Budget"]

# Room for the session's own fields inside the API's per-entry byte limit.
ENTRY_HEADROOM = 256 * 1024
_encode = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Budget:
    """How much one write call may carry (sessions, messages, bytes): memory stays bounded by these, not by the store."""

    sessions: int = 200
    messages: int = 5000
    bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.sessions <= IMPORT_MAX_SESSIONS:
            raise CliError(f"batch sessions must be between 1 and {IMPORT_MAX_SESSIONS}")
        if not 1 <= self.messages <= IMPORT_MAX_MESSAGES_PER_SESSION:
            raise CliError(f"batch messages must be between 1 and {IMPORT_MAX_MESSAGES_PER_SESSION}")


def parents_first(rows: list[tuple[str, str | None]]) -> list[str]:
    """Order ``(id, parent_id)`` pairs so every parent present comes before its children; stable otherwise."""
    children: dict[str, list[str]] = {}
    known = {session_id for session_id, _ in rows}
    roots: list[str] = []
    for session_id, parent in rows:
        if parent and parent in known and parent != session_id:
            children.setdefault(parent, []).append(session_id)
        else:
            roots.append(session_id)
    ordered: list[str] = []
    seen: set[str] = set()
    for root in roots + [session_id for session_id, _ in rows]:  # the second pass picks up cycles
        stack = [root]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            ordered.append(current)
            stack.extend(reversed(children.get(current, [])))
    return ordered


def _entry_size(session: dict[str, Any]) -> int:
    return len(_encode(session))


@dataclass
class WriteReport:
    """What a :class:`SessionWriter` did."""

    imported: int = 0
    skipped: int = 0
    detached: int = 0
    appended_messages: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"imported": self.imported, "skipped": self.skipped, "detached": self.detached,
                "appended_messages": self.appended_messages, "errors": self.errors}


class SessionWriter:
    """Writes ``export_session``-shaped dicts into ``db`` in bounded ``import_sessions`` batches."""

    def __init__(self, db: Any, budget: Budget | None = None) -> None:
        self.db = db
        self.budget = budget or Budget()
        self.report = WriteReport()
        self._batch: list[dict[str, Any]] = []
        self._labels: list[str] = []
        self._messages = 0
        self._bytes = 0

    def _fits_alone(self, session: dict[str, Any], size: int) -> bool:
        count = len(session.get("messages") or [])
        return count <= self.budget.messages and size <= min(self.budget.bytes, IMPORT_MAX_SESSION_BYTES - ENTRY_HEADROOM)

    async def add(self, session: dict[str, Any], label: str = "") -> None:
        """Queue one session (``label`` names it in errors, e.g. a line number); writes when a batch is full."""
        messages = session.get("messages")
        if not isinstance(messages, list):
            messages = []
        size = _entry_size(session)
        if not self._fits_alone(session, size):
            await self.flush()
            await self._write_large(session, label)
            return
        if (len(self._batch) >= self.budget.sessions or self._messages + len(messages) > self.budget.messages
                or self._bytes + size > self.budget.bytes):
            await self.flush()
        self._batch.append(session)
        self._labels.append(label)
        self._messages += len(messages)
        self._bytes += size

    async def flush(self) -> None:
        """Write whatever is queued as one ``import_sessions`` call."""
        batch, labels = self._batch, self._labels
        self._batch, self._labels, self._messages, self._bytes = [], [], 0, 0
        if batch:
            await self._import(batch, labels)

    async def _import(self, batch: list[dict[str, Any]], labels: list[str]) -> set[str]:
        result = await self.db.import_sessions(batch)
        if not result.get("ok"):
            for error in result.get("errors") or []:
                index = error.get("index")
                where = labels[index] if isinstance(index, int) and 0 <= index < len(labels) else ""
                self.report.errors.append({**error, "where": where})
            raise CliError(_error_line(self.report.errors))
        self.report.imported += int(result.get("imported") or 0)
        self.report.skipped += int(result.get("skipped") or 0)
        self.report.detached += int(result.get("detached") or 0)
        skipped = set(result.get("skipped_ids") or [])
        for session in batch:
            if session["id"] in skipped:
                await self._top_up(session["id"], session.get("messages") or [])
        return skipped

    async def add_paged(self, session: dict[str, Any], pages: AsyncIterator[list[dict[str, Any]]], label: str = "") -> None:
        """Write one session whose messages arrive page by page; memory holds one page, not the session.

        The session is imported with the messages of its first page that fit
        one call; the rest are appended. After an interruption the messages
        the destination already holds are skipped, never written twice.
        """
        await self.flush()
        session_id = session["id"]
        first: list[dict[str, Any]] = await anext(pages, [])
        head_end = self._head_length(session, first)
        skipped = await self._import([{**session, "messages": first[:head_end]}], [label])
        have = await self.db.message_count(session_id) if session_id in skipped else head_end
        position = 0  # stream index of the current page's first message
        page: list[dict[str, Any]] | None = first
        while page is not None:
            start = max(0, have - position)
            if start < len(page):
                await self._append(session_id, page[start:])
            position += len(page)
            page = await anext(pages, None)

    def _head_length(self, session: dict[str, Any], messages: list[dict[str, Any]]) -> int:
        """How many of ``messages`` fit into the session's own import entry."""
        room = min(self.budget.bytes, IMPORT_MAX_SESSION_BYTES - ENTRY_HEADROOM) - _entry_size({**session, "messages": []})
        count = 0
        while count < len(messages) and count < self.budget.messages:
            room -= len(_encode(messages[count])) + 1
            if room < 0 and count > 0:
                break
            count += 1
        return count

    async def _write_large(self, session: dict[str, Any], label: str) -> None:
        messages = list(session.get("messages") or [])
        await self.add_paged({**session, "messages": []}, _one_page(messages), label)

    async def _top_up(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        """Append the messages the destination is missing (it holds a prefix of them after an interruption)."""
        have = await self.db.message_count(session_id)
        if have < len(messages):
            await self._append(session_id, messages[have:])

    async def _append(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        position = 0
        while position < len(messages):
            chunk, position = _chunk(messages, position, self.budget)
            await self.db.append_messages_batch(session_id, chunk)
            self.report.appended_messages += len(chunk)


async def _one_page(messages: list[dict[str, Any]]) -> AsyncIterator[list[dict[str, Any]]]:
    yield messages


def _chunk(messages: list[dict[str, Any]], start: int, budget: Budget) -> tuple[list[dict[str, Any]], int]:
    end, size = start, 0
    while end < len(messages) and end - start < budget.messages:
        size += len(_encode(messages[end]))
        if size > budget.bytes and end > start:
            break
        end += 1
    return messages[start:end], end


def _error_line(errors: list[dict[str, Any]]) -> str:
    shown = []
    for error in errors[:3]:
        where = error.get("where") or error.get("session_id") or f"entry {error.get('index')}"
        shown.append(f"{where}: {error.get('error')}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return "import refused, nothing in this batch was written: " + "; ".join(shown) + more
