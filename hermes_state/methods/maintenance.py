"""Deletion, pruning, archiving, export/import and storage maintenance.

Retention
    ``prune_sessions``, ``archive_sessions``, ``list_prune_candidates`` and
    ``count_open_prune_matches`` share one filter set (see
    :data:`FILTER_NAMES`); selection and deletion happen in the same
    transaction, and only ended sessions are ever chosen (the count reports
    the open ones a prune skipped).

Export
    ``export_all`` returns a list, as the reference store does: the whole
    export in memory. For stores of any size use the streaming forms:

    * ``iter_export_all(source=None)`` is an async iterator of the same
      session dicts; it reads sessions and messages in pages, so memory is
      bounded by the largest single session (each one is still checked
      against the in-memory export limit);
    * ``export_all_to(path, source=None)`` writes JSON Lines, one session
      object per line, streaming even a single session's messages page by
      page; memory stays flat whatever the store size, and the file appears
      atomically when complete.

    Both read sessions newest ``started_at`` first: that key never changes,
    so a session cannot be skipped or repeated while the export runs
    (``export_all`` re-sorts by last activity, as the reference does).

Import
    ``import_sessions`` validates everything first (types, sizes, duplicate
    ids and titles) and then writes all sessions in one transaction, or
    nothing.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from ..commands.maintenance import (
    ArchiveMatchingSessions,
    ArchiveStaleSessions,
    DeleteEmptySessions,
    DeleteSessionIfEmpty,
    DeleteSessions,
    ImportedSession,
    ImportSessions,
    PruneEmptyGhostSessions,
    PruneSessions,
    SessionFilters,
    Vacuum,
)
from ..config import load_config
from ..encoding import encode_message_dicts, prompt_hash, scrub_surrogates
from ..errors import SessionExportTooLargeError, StoreClosedError
from ..facade import StoreBase, opt_text, require_id, rows_size
from ..limits import INT64_MAX, INT64_MIN, finite_arg, json_text
from ..off_loop import off_loop
from ..private_files import private_writer
from .listing import finite_number, flag_arg, int_arg

__all__ = [
    "FILTER_NAMES",
    "IMPORT_MAX_MESSAGES_PER_SESSION",
    "IMPORT_MAX_SESSIONS",
    "IMPORT_MAX_SESSION_BYTES",
    "IMPORT_MAX_TOTAL_BYTES",
    "IMPORT_MAX_TOTAL_MESSAGES",
    "MaintenanceMethods",
]

log = logging.getLogger("hermes_state")

DAY = 86_400.0
GHOST_AGE = DAY

# Filter name -> kind ("time"/"number": finite number, "count": int, "text": str, "flag": bool).
_FILTER_KINDS: dict[str, str] = {
    "last_active_before": "time", "last_active_after": "time", "started_before": "time", "started_after": "time",
    "title_like": "text", "end_reason": "text", "cwd_prefix": "text", "model_like": "text", "provider": "text",
    "user_id": "text", "chat_id": "text", "chat_type": "text", "branch_like": "text",
    "min_messages": "count", "max_messages": "count", "min_tokens": "count", "max_tokens": "count",
    "min_tool_calls": "count", "max_tool_calls": "count", "min_cost": "number", "max_cost": "number",
    "archived": "flag",
}
FILTER_NAMES = frozenset(_FILTER_KINDS)

# Import limits (a hostile or mistaken payload fails validation, nothing is written).
IMPORT_MAX_SESSIONS = 500
IMPORT_MAX_MESSAGES_PER_SESSION = 10_000
IMPORT_MAX_SESSION_BYTES = 5 * 1024 * 1024
IMPORT_MAX_TOTAL_BYTES = 25 * 1024 * 1024
IMPORT_MAX_TOTAL_MESSAGES = 50_000
IMPORT_MAX_ID_CHARS = 512
IMPORT_MAX_DEPTH = 64

_IMPORT_TEXT = (
    "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json",
    "model", "end_reason", "cwd", "git_branch", "git_repo_root", "billing_provider", "billing_base_url",
    "billing_mode", "cost_status", "cost_source", "pricing_version", "profile_name",
)
_IMPORT_REAL = ("ended_at", "estimated_cost_usd", "actual_cost_usd")
_IMPORT_COUNT = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
                 "api_call_count")
_IMPORT_FLAG = ("archived", "pinned")
_TITLE_SOURCES = ("derived", "llm", "user")
_MESSAGE_TEXT = ("tool_call_id", "tool_name", "effect_disposition", "finish_reason", "reasoning",
                 "reasoning_content", "api_content", "display_kind")

EXPORT_SESSION_PAGE = 100
EXPORT_MESSAGE_PAGE = 1000


def _path_arg(value: Any, name: str) -> Path | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return Path(value)
    raise TypeError(f"{name} must be a path or None, not {type(value).__name__}")


def _age_days(value: Any, name: str) -> float:
    days = finite_number(value, name)
    if days < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return days


def _filter_value(name: str, value: Any) -> Any:
    if value is None:
        return None
    kind = _FILTER_KINDS[name]
    if kind in ("time", "number"):
        return finite_number(value, name)
    if kind == "count":
        return int_arg(value, name)
    if kind == "flag":
        return flag_arg(value, name)
    return opt_text(value, name)


def session_filters(older_than_days: Any, source: Any, filters: Mapping[str, Any]) -> SessionFilters:
    """Validate the retention filter set; ``older_than_days`` sets ``last_active_before`` when no cutoff is given."""
    unknown = sorted(set(filters) - FILTER_NAMES)
    if unknown:
        raise TypeError(f"unknown session filter(s): {', '.join(unknown)}")
    values = {name: _filter_value(name, value) for name, value in filters.items()}
    if older_than_days is not None:
        days = _age_days(older_than_days, "older_than_days")
        if values.get("last_active_before") is None and values.get("started_before") is None:
            values["last_active_before"] = time.time() - days * DAY
    return SessionFilters(source=opt_text(source, "source") or None, **values)


class _ImportProblem(ValueError):
    def __init__(self, message: str, session_id: str = "") -> None:
        super().__init__(message)
        self.session_id = session_id


def _json_size(value: Any, budget: int) -> int:
    """Approximate JSON size of ``value`` in bytes; stops early (``_ImportProblem``) past ``budget``."""
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > IMPORT_MAX_DEPTH:
            raise _ImportProblem(f"session is nested more than {IMPORT_MAX_DEPTH} levels deep")
        if isinstance(item, str):
            total += len(item) + 2 if len(item) > budget else len(item.encode("utf-8", "surrogatepass")) + 2
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise _ImportProblem("object keys must be strings")
                total += len(key) + 4
                stack.append((child, depth + 1))
        elif isinstance(item, (list, tuple)):
            total += 2
            stack.extend((child, depth + 1) for child in item)
        elif item is None or isinstance(item, (bool, int)):
            total += 5
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _ImportProblem("numbers must be finite")
            total += 24
        else:
            raise _ImportProblem(f"a {type(item).__name__} value is not JSON")
        if total > budget:
            raise _ImportProblem("session exceeds the import size limit")
    return total


def _text_field(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    if value is None or isinstance(value, str):
        return value
    raise _ImportProblem(f"{name} must be a string or null, not {type(value).__name__}")


def _number_field(raw: Mapping[str, Any], name: str, kind: str) -> Any:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _ImportProblem(f"{name} must be a number or null, not {type(value).__name__}")
    if kind == "count":
        if not isinstance(value, int) or not 0 <= value <= INT64_MAX:
            raise _ImportProblem(f"{name} must be a non-negative integer of at most 2**63 - 1")
        return value
    try:
        return finite_arg(value, name)
    except ValueError as exc:
        raise _ImportProblem(str(exc)) from None


def _model_config_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            raise _ImportProblem("model_config must be valid JSON") from None
        if not isinstance(parsed, dict):
            raise _ImportProblem("model_config must be a JSON object")
        return value
    if not isinstance(value, Mapping):
        raise _ImportProblem("model_config must be a JSON object")
    try:
        return json_text(dict(value), "model_config")
    except (TypeError, ValueError) as exc:
        raise _ImportProblem(str(exc)) from None


def _check_message(position: int, message: Any) -> None:
    if not isinstance(message, Mapping):
        raise _ImportProblem(f"messages[{position}] must be an object")
    role = message.get("role")
    if not isinstance(role, str) or not role.strip():
        raise _ImportProblem(f"messages[{position}].role must be a non-empty string")
    for name in _MESSAGE_TEXT:
        value = message.get(name)
        if value is not None and not isinstance(value, str):
            raise _ImportProblem(f"messages[{position}].{name} must be a string or null")
    for name in ("platform_message_id", "message_id"):
        value = message.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
            raise _ImportProblem(f"messages[{position}].{name} must be a string or null")
    count = message.get("token_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or not INT64_MIN <= count <= INT64_MAX):
        raise _ImportProblem(f"messages[{position}].token_count must be a signed 64-bit integer or null")
    stamp = message.get("timestamp")
    if stamp is not None:
        try:
            finite_arg(stamp, "timestamp")
        except (TypeError, ValueError):
            raise _ImportProblem(f"messages[{position}].timestamp must be a finite number or null") from None


class MaintenanceMethods(StoreBase):
    """Deletion, pruning, archiving, export/import and storage maintenance."""

    if TYPE_CHECKING:  # provided by the core and other method groups of SessionDB

        async def get_meta(self, key: str) -> str | None: ...

        async def set_meta(self, key: str, value: str | None, *, cursor: Any = None) -> None: ...

        async def get_compression_lineage(self, session_id: str) -> list[str]: ...

        @staticmethod
        def sanitize_title(title: str | None) -> str | None: ...

    # ------------------------------------------------------------ deletion

    async def _remove_files(self, sessions_dir: Path | None, session_ids: list[str]) -> None:
        await self._remove_session_files(sessions_dir, session_ids)

    async def get_session_delete_targets(self, session_id: str) -> list[str]:
        """Return ``[session_id, *sorted delegate descendants]`` (``[]`` for an unknown id).

        Pass it back to ``delete_session(..., expected_delete_ids=...)`` for a
        delete that refuses to run if the set changed meanwhile.
        """
        return await self._query("session_delete_targets", require_id(session_id))

    async def delete_session_if_empty(
        self, session_id: str, sessions_dir: os.PathLike[str] | str | None = None
    ) -> bool:
        """Delete the session only if it is untitled, has no messages and no children; returns whether it did."""
        directory = _path_arg(sessions_dir, "sessions_dir")
        deleted = bool(await self._write(DeleteSessionIfEmpty(session_id=require_id(session_id))))
        if deleted:
            await self._remove_files(directory, [session_id])
        return deleted

    async def delete_sessions(
        self, session_ids: list[str], sessions_dir: os.PathLike[str] | str | None = None
    ) -> int:
        """Delete the listed sessions (and their delegate sub-sessions) in one transaction.

        Other children are detached and survive; unknown ids are ignored.
        Returns how many of the listed sessions were deleted.
        """
        if isinstance(session_ids, (str, bytes)) or not isinstance(session_ids, (list, tuple, set, frozenset)):
            raise TypeError(f"session_ids must be a list of ids, not {type(session_ids).__name__}")
        ids = tuple(dict.fromkeys(require_id(i, "session_ids item") for i in session_ids))
        directory = _path_arg(sessions_dir, "sessions_dir")
        if not ids:
            return 0
        count, removed = await self._write(DeleteSessions(session_ids=ids))
        await self._remove_files(directory, removed)
        return int(count)

    async def _delete_selected(self, command: Any, sessions_dir: Path | None) -> int:
        removed = await self._write(command)
        await self._remove_files(sessions_dir, removed)
        return len(removed)

    async def delete_empty_sessions(self, sessions_dir: os.PathLike[str] | str | None = None) -> int:
        """Delete ended, non-archived sessions with ``message_count = 0``; returns how many."""
        return await self._delete_selected(DeleteEmptySessions(), _path_arg(sessions_dir, "sessions_dir"))

    async def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: str | None = None,
        sessions_dir: os.PathLike[str] | str | None = None,
        **filters: Any,
    ) -> int:
        """Delete ended sessions inactive for ``older_than_days`` days that match every filter.

        Filters (:data:`FILTER_NAMES`): ``last_active_before/after``,
        ``started_before/after`` (epoch seconds; an explicit
        ``last_active_before`` or ``started_before`` replaces the age cutoff),
        ``title_like``, ``model_like``, ``branch_like`` (case-insensitive
        substrings), ``end_reason``, ``cwd_prefix``, ``provider``,
        ``user_id``, ``chat_id``, ``chat_type``, ``min/max_messages``,
        ``min/max_tokens``, ``min/max_cost``, ``min/max_tool_calls``,
        ``archived``. ``older_than_days=None`` means no age limit. Children of
        deleted sessions are detached, not deleted. Returns how many were
        deleted. A negative age raises ``ValueError``; an unknown filter ``TypeError``.
        """
        selection = session_filters(older_than_days, source, filters)
        return await self._delete_selected(PruneSessions(filters=selection), _path_arg(sessions_dir, "sessions_dir"))

    async def prune_empty_ghost_sessions(self, sessions_dir: os.PathLike[str] | str | None = None) -> int:
        """Delete ended, untitled, message-less ``tui`` sessions older than a day; returns how many."""
        command = PruneEmptyGhostSessions(cutoff=time.time() - GHOST_AGE)
        return await self._delete_selected(command, _path_arg(sessions_dir, "sessions_dir"))

    async def list_prune_candidates(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """Return the sessions ``prune_sessions`` would delete with the same arguments, least recent first.

        Rows: ``id, source, title, model, started_at, last_active, ended_at,
        message_count, archived``.
        """
        return await self._query("prune_candidates", session_filters(older_than_days, source, filters))

    async def count_open_prune_matches(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> int:
        """Return how many open sessions match the prune filters: those a prune with these arguments skips.

        Exactly the predicate of :meth:`prune_sessions` and
        :meth:`list_prune_candidates` (same filters, same age clock, same
        validation: an unknown filter is a ``TypeError``, a bad value a
        ``TypeError`` or ``ValueError``) with only the ended-session guard
        inverted. It counts; nothing becomes prunable. Unlike
        ``prune_sessions`` the default ``older_than_days`` is None (no age
        limit): pass a prune's arguments unchanged to learn what it left.
        """
        return int(await self._query("open_prune_match_count", session_filters(older_than_days, source, filters)))

    async def archive_sessions(
        self, older_than_days: float | None = None, source: str | None = None, **filters: Any
    ) -> int:
        """Archive every not-yet-archived session matching the prune filters, with its compression lineage.

        Returns how many matching sessions were archived.
        """
        filters.setdefault("archived", False)
        return int(await self._write(ArchiveMatchingSessions(filters=session_filters(older_than_days, source, filters))))

    async def archive_stale_sessions(self, idle_days: float | None, *, exclude_pinned: bool = True) -> int:
        """Archive sessions (and their lineages) with no activity for ``idle_days`` days; returns how many.

        Compression-ended parents are not selected themselves; pinned sessions
        are skipped unless ``exclude_pinned=False``. ``idle_days`` None or
        negative disables the sweep (returns 0).
        """
        pinned = flag_arg(exclude_pinned, "exclude_pinned")
        if idle_days is None:
            return 0
        days = finite_number(idle_days, "idle_days")
        if days < 0:
            return 0
        return int(await self._write(ArchiveStaleSessions(cutoff=time.time() - days * DAY, exclude_pinned=pinned)))

    async def maybe_auto_prune_and_vacuum(
        self,
        retention_days: float = 90,
        min_interval_hours: float = 24,
        vacuum: bool = True,
        sessions_dir: os.PathLike[str] | str | None = None,
        min_vacuum_interval_days: float = 30,
    ) -> dict[str, Any]:
        """Prune sessions older than ``retention_days`` at most once per ``min_interval_hours``.

        After a prune that deleted something, VACUUMs if ``vacuum`` and the
        last VACUUM is older than ``min_vacuum_interval_days``. Throttled
        through ``state_meta`` (``last_auto_prune``, ``last_vacuum``). Never
        raises: returns ``{skipped, pruned, vacuumed}`` plus ``error`` when
        something failed.
        """
        result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
        try:
            for name, value in (("retention_days", retention_days), ("min_interval_hours", min_interval_hours),
                                ("min_vacuum_interval_days", min_vacuum_interval_days)):
                finite_number(value, name)  # reported under the caller's names
            now = time.time()
            if self._recently(await self.get_meta("last_auto_prune"), now, min_interval_hours * 3600.0):
                result["skipped"] = True
                return result
            result["pruned"] = await self.prune_sessions(older_than_days=retention_days, sessions_dir=sessions_dir)
            vacuum_due = not self._recently(await self.get_meta("last_vacuum"), now, min_vacuum_interval_days * DAY)
            if vacuum and result["pruned"] > 0 and vacuum_due:
                try:
                    await self.vacuum()
                    result["vacuumed"] = True
                    await self.set_meta("last_vacuum", str(now))
                except Exception as exc:
                    log.warning("state.db VACUUM failed: %s", exc)
            await self.set_meta("last_auto_prune", str(now))
        except Exception as exc:
            log.warning("state.db auto-maintenance failed: %s", exc)
            result["error"] = str(exc)
        return result

    async def maybe_auto_archive(
        self, idle_days: float = 3, min_interval_hours: float = 24, exclude_pinned: bool = True
    ) -> dict[str, Any]:
        """Archive sessions idle for ``idle_days`` at most once per ``min_interval_hours``.

        Throttled through ``state_meta`` key ``last_auto_archive``. Never
        raises: returns ``{skipped, archived}`` plus ``error`` on failure.
        """
        result: dict[str, Any] = {"skipped": False, "archived": 0}
        try:
            if idle_days is not None:
                finite_number(idle_days, "idle_days")
            finite_number(min_interval_hours, "min_interval_hours")
            now = time.time()
            if self._recently(await self.get_meta("last_auto_archive"), now, min_interval_hours * 3600.0):
                result["skipped"] = True
                return result
            result["archived"] = await self.archive_stale_sessions(idle_days, exclude_pinned=exclude_pinned)
            await self.set_meta("last_auto_archive", str(now))
        except Exception as exc:
            log.warning("state.db auto-archive failed: %s", exc)
            result["error"] = str(exc)
        return result

    @staticmethod
    def _recently(stamp: str | None, now: float, interval: Any) -> bool:
        """True when the epoch-seconds ``stamp`` is less than ``interval`` seconds old (junk stamps are old)."""
        window = finite_number(interval, "interval")
        try:
            return stamp is not None and now - float(stamp) < window
        except ValueError:
            return False

    # ---------------------------------------------------------------- export

    def _export_limit(self, max_messages: Any) -> int:
        """The in-memory export limit: ``max_messages``, else config ``sessions.max_export_messages`` (0 = none)."""
        if max_messages is None:
            config = getattr(self._backend, "config", None) or load_config()
            return int(config.sessions.max_export_messages)
        limit = int_arg(max_messages, "max_messages")
        if limit < 0:
            raise ValueError("max_messages must be non-negative")
        return limit

    async def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """Return the session's active message count; raise if it exceeds the in-memory export limit.

        ``max_messages`` None uses config ``sessions.max_export_messages``
        (default 20000; 0 disables the check). Raises
        :class:`~hermes_state.SessionExportTooLargeError` (a ``ValueError``).
        """
        session_id = require_id(session_id)
        limit = self._export_limit(max_messages)
        bound = min(limit, INT64_MAX - 1) + 1 if limit else None  # one past the limit, still a 64-bit int
        count = await self._query("active_message_count", session_id, bound)
        if limit and count > limit:
            raise SessionExportTooLargeError(session_id, count, limit)
        return int(count)

    async def export_session(self, session_id: str) -> dict[str, Any] | None:
        """Return the ``get_session`` dict plus ``"messages"`` (active rows, ``get_messages`` shape), or None.

        Session and messages come from one snapshot. Raises
        :class:`~hermes_state.SessionExportTooLargeError` above the in-memory
        export limit (see :meth:`assert_export_safe`).
        """
        session_id = require_id(session_id)
        limit = self._export_limit(None)
        session, count = await self._query("export_session_data", session_id, limit or None)
        if session is None and count:
            raise SessionExportTooLargeError(session_id, count, limit)
        return session

    async def export_session_lineage(self, session_id: str) -> dict[str, Any] | None:
        """Export a whole compression lineage as one logical session, or None.

        Returns the tip segment's export with ``segments`` (every segment's
        export, root first), ``lineage_session_ids``, ``message_count`` (all
        exported messages) and ``messages`` (concatenated in lineage order).
        """
        session_id = require_id(session_id)
        lineage = await self.get_compression_lineage(session_id)
        segments = [s for s in [await self.export_session(i) for i in lineage] if s is not None]
        if not segments:
            return None
        result = dict(segments[-1])
        result["segments"] = segments
        result["lineage_session_ids"] = [s["id"] for s in segments]
        result["messages"] = [m for s in segments for m in s["messages"]]
        result["message_count"] = len(result["messages"])
        return result

    async def _export_pages(self, source: str | None) -> AsyncIterator[dict[str, Any]]:
        """Sessions (``get_session`` shape + ``last_active``) in keyset pages, newest ``started_at`` first."""
        after: tuple[float, str] | None = None
        while True:
            page = await self._query("export_sessions_page", source, after, EXPORT_SESSION_PAGE)
            for session in page:
                yield session
            if len(page) < EXPORT_SESSION_PAGE:
                return
            after = (page[-1]["started_at"], page[-1]["id"])

    async def _message_pages(self, session_id: str) -> AsyncIterator[list[dict[str, Any]]]:
        after = 0
        while True:
            page = await self._query("export_messages_page", session_id, after, EXPORT_MESSAGE_PAGE)
            if page:
                yield page
            if len(page) < EXPORT_MESSAGE_PAGE:
                return
            after = page[-1]["id"]

    async def iter_export_all(
        self, source: str | None = None, *, max_messages: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield every session (children and archived included) with ``"messages"``, page by page.

        The same dicts as :meth:`export_all` (``get_session`` shape +
        ``last_active`` + active messages), newest ``started_at`` first.
        Memory is bounded by the largest session: each one is checked with
        :meth:`assert_export_safe` (``max_messages`` as there) before its
        messages are read.
        """
        source = opt_text(source, "source")
        limit = self._export_limit(max_messages)
        async for session in self._export_pages(source):
            await self.assert_export_safe(session["id"], limit)
            messages = [m async for page in self._message_pages(session["id"]) for m in page]
            # A new dict: the page of session rows must not keep every yielded transcript alive.
            yield {**session, "messages": messages}

    async def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        """Return every session (children and archived included) with its active ``"messages"``.

        Ordered by last activity, newest first; each session has
        ``last_active``. The whole export is held in memory: a session above
        the export limit aborts it with ``SessionExportTooLargeError``. Prefer
        :meth:`iter_export_all` or :meth:`export_all_to` for large stores.
        """
        sessions = [s async for s in self.iter_export_all(source)]
        sessions.sort(key=lambda s: (s["last_active"], s["started_at"], s["id"]), reverse=True)
        return sessions

    async def export_all_to(self, path: os.PathLike[str] | str, source: str | None = None) -> int:
        """Write every session as JSON Lines (one ``export_all``-shaped object per line); returns the count.

        Sessions and their messages are read and written page by page, so
        memory stays flat however large the store or a single session is
        (no per-session limit applies). The file is written beside ``path``
        and renamed over it when complete. ``bytes`` content is written as
        base64 text; everything else is plain JSON.
        """
        target = _path_arg(path, "path")
        assert target is not None
        source = opt_text(source, "source")
        temp = target.with_name(f".{target.name}.{os.getpid()}.partial")
        encode = msgspec.json.Encoder().encode
        out = await off_loop(private_writer, temp)  # conversations: 0600 whatever the umask
        written = 0
        try:
            async for session in self._export_pages(source):
                head = encode(session)
                chunks = [head[:-1], b',"messages":[']
                first = True
                async for page in self._message_pages(session["id"]):
                    chunks.append((b"" if first else b",") + b",".join(encode(m) for m in page))
                    first = False
                    await off_loop(out.write, b"".join(chunks))
                    chunks = []
                chunks.append(b"]}\n")
                await off_loop(out.write, b"".join(chunks))
                written += 1
            await off_loop(_finish_file, out)
            await off_loop(os.replace, temp, target)
        except BaseException:
            await off_loop(_discard_file, out, temp)
            raise
        return written

    # ---------------------------------------------------------------- import

    def _import_title(self, value: Any, seen: dict[str, str], session_id: str) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise _ImportProblem(f"title must be a string or null, not {type(value).__name__}")
        try:
            title = self.sanitize_title(value)  # control and invisible characters go, as for set_session_title
        except ValueError as exc:
            raise _ImportProblem(str(exc)) from None
        if title is not None:
            if title in seen:
                raise _ImportProblem(f"title {title!r} is also used by session {seen[title]} in this import")
            seen[title] = session_id
        return title

    def _import_entry(self, index: int, raw: Any, titles: dict[str, str]) -> tuple[ImportedSession, int]:
        if not isinstance(raw, Mapping):
            raise _ImportProblem("session must be an object")
        raw_id = raw.get("id")
        if not isinstance(raw_id, str) or not raw_id.strip():
            raise _ImportProblem("session id is required (a non-empty string)")
        session_id = raw_id.strip()
        try:
            if len(session_id) > IMPORT_MAX_ID_CHARS or "\x00" in session_id:
                raise _ImportProblem(f"session id must be at most {IMPORT_MAX_ID_CHARS} characters, without NUL")
            messages = raw.get("messages")
            messages = [] if messages is None else messages
            if not isinstance(messages, list):
                raise _ImportProblem("messages must be a list")
            if len(messages) > IMPORT_MAX_MESSAGES_PER_SESSION:
                raise _ImportProblem("messages exceeds the per-session import limit")
            size = _json_size(raw, IMPORT_MAX_SESSION_BYTES)
            for position, message in enumerate(messages):
                _check_message(position, message)
            columns: list[tuple[str, Any]] = [("source", _text_field(raw, "source") or "import")]
            columns.extend((name, _text_field(raw, name)) for name in _IMPORT_TEXT if name != "source")
            columns.append(("model_config", _model_config_text(raw.get("model_config"))))
            started = _number_field(raw, "started_at", "real")
            columns.append(("started_at", time.time() if started is None else started))
            columns.extend((name, _number_field(raw, name, "real")) for name in _IMPORT_REAL)
            columns.extend((name, _number_field(raw, name, "count") or 0) for name in _IMPORT_COUNT)
            columns.extend((name, 1 if raw.get(name) else 0) for name in _IMPORT_FLAG)
            title_source = _text_field(raw, "title_source")
            if title_source is not None and title_source not in _TITLE_SOURCES:
                raise _ImportProblem(f"title_source must be one of {', '.join(_TITLE_SOURCES)}")
            title = self._import_title(raw.get("title"), titles, session_id)
            columns.append(("title_source", title_source if title else None))
            prompt = _text_field(raw, "system_prompt")
            parent = (_text_field(raw, "parent_session_id") or "").strip() or None
            try:
                rows = encode_message_dicts(messages)
            except (TypeError, ValueError) as exc:
                raise _ImportProblem(str(exc)) from None
        except _ImportProblem as problem:
            problem.session_id = session_id
            raise
        entry = ImportedSession(
            index=index,
            session_id=scrub_surrogates(session_id),
            columns=tuple((name, scrub_surrogates(v) if isinstance(v, str) else v) for name, v in columns),
            title=title,
            system_prompt=None if prompt is None else scrub_surrogates(prompt),
            system_prompt_hash=None if prompt is None else prompt_hash(scrub_surrogates(prompt)),
            parent_session_id=parent,
            rows=rows,
        )
        return entry, size

    async def import_sessions(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Import sessions shaped like ``export_session`` / ``export_all`` output, all or nothing.

        Everything is validated first: a non-list or more than 500 entries
        raises ``ValueError``; per-entry problems (missing, over-long or
        duplicate ids, wrong field types, messages that are not objects, more
        than 10,000 messages, an entry over 5 MiB, more than 25 MiB or 50,000
        messages in total, titles that are too long or already taken) are
        collected and returned as ``{"ok": False, "imported": 0, "skipped": 0,
        "detached": 0, "errors": [{"index", "error", "session_id"?}]}`` with
        nothing written. Otherwise one transaction inserts the new sessions
        (existing ids are skipped), recomputes their counters and links each
        parent that exists without creating a cycle (others count as
        ``detached``). Returns ``{"ok": True, "imported", "skipped",
        "detached", "imported_ids", "skipped_ids", "errors": []}``.
        """
        if not isinstance(sessions, list):
            raise ValueError("sessions must be a list")
        if len(sessions) > IMPORT_MAX_SESSIONS:
            raise ValueError(f"sessions must contain at most {IMPORT_MAX_SESSIONS} entries")
        entries: list[ImportedSession] = []
        errors: list[dict[str, Any]] = []
        seen_ids: set[str] = set()
        titles: dict[str, str] = {}
        total_bytes = total_messages = 0
        for index, raw in enumerate(sessions):
            try:
                entry, size = self._import_entry(index, raw, titles)
                if entry.session_id in seen_ids:
                    raise _ImportProblem("duplicate session id", entry.session_id)
                total_bytes += size
                total_messages += len(entry.rows)
                if total_bytes > IMPORT_MAX_TOTAL_BYTES:
                    raise _ImportProblem("import exceeds the total size limit", entry.session_id)
                if total_messages > IMPORT_MAX_TOTAL_MESSAGES:
                    raise _ImportProblem("messages exceeds the total import limit", entry.session_id)
            except _ImportProblem as problem:
                item: dict[str, Any] = {"index": index, "error": str(problem)}
                if problem.session_id:
                    item["session_id"] = problem.session_id
                errors.append(item)
                continue
            seen_ids.add(entry.session_id)
            entries.append(entry)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
        command = ImportSessions(sessions=tuple(entries))
        return await self._write(command, size=rows_size(r for e in entries for r in e.rows))

    # --------------------------------------------------------------- storage

    async def logical_size_bytes(self) -> int | None:
        """Return ``page_count * page_size`` of the database, or None when it cannot be read."""
        try:
            return await self._query("logical_size")
        except StoreClosedError:
            raise
        except Exception as exc:
            log.debug("could not read the logical database size: %s", exc)
            return None

    async def vacuum(self) -> int:
        """Optimize the FTS indexes, then checkpoint (TRUNCATE), VACUUM and checkpoint again.

        Runs on the writer between group commits, outside any transaction.
        Returns how many FTS tables were optimized. A VACUUM error propagates
        (it is not retried when the file is busy).
        """
        return int(await self._write(Vacuum(), patience=0.0))


def _finish_file(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()


def _discard_file(handle: Any, path: Path) -> None:
    handle.close()
    try:
        path.unlink()
    except FileNotFoundError:
        pass
