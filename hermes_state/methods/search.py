"""Message and session search, FTS index upkeep (issue: search).

``search_messages`` is a read: it never enters the write queue, so a search
never waits for a write batch to commit (WAL readers see the last committed
state). Index maintenance (backfills, the legacy-layout migration, optimize
and rebuild) goes through the writer like any other write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from ..commands.search import (
    CompactDatabase,
    DemoteLegacyFts,
    EnsureFtsTables,
    FtsRebuildStep,
    FtsTrashTeardownStep,
    OptimizeFts,
    RebuildFts,
    RepairFtsIndexes,
    RepairOptimizeBookkeeping,
    ResetStaleCjkIndex,
    SettleFtsStorage,
)
from ..errors import FtsRepairNeeded, OperationalError, SearchTimeoutError
from ..facade import StoreBase, count_arg, opt_text
from ..limits import INT64_MAX
from ..session_settings import bound_session_setting
from .deadline import Deadline

__all__ = ["SEARCH_RESULT_FIELDS", "SearchMethods"]

log = logging.getLogger("hermes_state")

SEARCH_RESULT_FIELDS = (
    "id",
    "session_id",
    "role",
    "snippet",
    "timestamp",
    "tool_name",
    "source",
    "model",
    "session_started",
    "context",
)
DEFAULT_SEARCH_SLOW_MS = 1000.0
DEFAULT_SEARCH_TIMEOUT_MS = 10000.0
# optimize_fts_storage gives up on a phase after this many failed steps in a row.
MAX_FAILED_STEPS = 20


def search_fields(fields: Collection[str] | None) -> tuple[str, ...] | None:
    """Validate a ``fields`` projection; returns it in canonical order (None = every field).

    Raises ``TypeError`` for a plain string and ``ValueError`` naming unknown fields.
    """
    if fields is None:
        return None
    if isinstance(fields, str):
        raise TypeError("search fields must be a collection of field names, not a string")
    requested = set(fields)
    unknown = requested.difference(SEARCH_RESULT_FIELDS)
    if unknown:
        raise ValueError(f"unknown search result field(s): {', '.join(sorted(map(str, unknown)))}")
    return tuple(f for f in SEARCH_RESULT_FIELDS if f in requested)


def _names(value: Iterable[str] | None, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, not {type(value).__name__}")
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a list of strings, not {type(value).__name__}") from None
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} items must be str, not {type(item).__name__}")
    return items


Names = tuple[str, ...] | None


def _query_filters(query: Any, sources: Any, excluded: Any, roles: Any) -> tuple[Names, Names, Names]:
    """Check a search's query type and filters; returns (sources, excluded sources, roles or None)."""
    if query is not None and not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    return (
        _names(sources, "source_filter"),
        _names(excluded, "exclude_sources"),
        _names(roles, "role_filter") or None,
    )


def _non_negative(value: Any, name: str) -> int:
    number = count_arg(value, name)
    if number < 0:
        raise ValueError(f"{name} must be non-negative")
    return number


def _slow_ms(config: Any) -> float:
    """The slow-search threshold: the turn's bound ``search_slow_ms``, else the environment, else the config."""
    raw: Any = bound_session_setting("search_slow_ms")
    if raw is None:
        raw = os.environ.get("HERMES_SEARCH_SLOW_MS")
    if raw is None or not str(raw).strip():
        raw = getattr(getattr(config, "sessions", None), "search_slow_ms", None)
    try:
        return float(raw) if raw is not None else DEFAULT_SEARCH_SLOW_MS
    except (TypeError, ValueError):
        return DEFAULT_SEARCH_SLOW_MS


def _timeout_ms(config: Any) -> float:
    raw = getattr(getattr(config, "sessions", None), "search_timeout_ms", None)
    return DEFAULT_SEARCH_TIMEOUT_MS if raw is None else float(raw)


def _id_rank(row: dict[str, Any], needle: str) -> int:
    ids = [str(row.get(key) or "").lower() for key in ("id", "_lineage_root_id")]
    ids = [i for i in ids if i]
    if needle in ids:
        return 0
    if any(i.startswith(needle) for i in ids):
        return 1
    return 2


class SearchMethods(StoreBase):
    """Message and session search, FTS index upkeep (issue: search)."""

    # ------------------------------------------------------------ messages

    async def search_messages(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        fields: Collection[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Full-text search over message content; returns a page of hit dicts.

        Each hit has ``id, session_id, role, snippet, timestamp, tool_name,
        source, model, session_started, context`` (in that order, or only the
        ``fields`` asked for). ``snippet`` marks matches with ``>>>``/``<<<``;
        ``context`` holds the messages before and after the hit. Text that
        word search cannot find as typed (``C#``, ``status=502``, URLs, paths,
        e-mail addresses, emoji) is matched as literal substrings (tool rows
        included, newest first) when the word search has no hit. Hostile
        query text never raises: FTS5 syntax is sanitized, and what neither
        route can answer returns ``[]``. ``source_filter=[]`` matches nothing,
        ``role_filter=[]`` means no role filter. ``sort`` is ``"newest"``,
        ``"oldest"`` or anything else for relevance. Compacted history is
        searched unless ``include_inactive`` widens it to every row.

        A search that runs longer than ``sessions.search_timeout_ms`` (or
        whose caller is cancelled) is interrupted on its connection; the
        deadline raises :class:`~hermes_state.errors.SearchTimeoutError`.
        """
        projection = search_fields(fields)
        sources, excluded, roles = _query_filters(query, source_filter, exclude_sources, role_filter)
        limit = _non_negative(limit, "limit")
        offset = _non_negative(offset, "offset")
        sort_key = opt_text(sort, "sort")
        order = sort_key.strip().lower() if sort_key else None
        if order not in ("newest", "oldest"):
            order = None
        await self._ensure_open()
        if not query or not query.strip():
            return []
        with_context = projection is None or "context" in projection
        with_snippet = projection is None or "snippet" in projection
        slow_ms = _slow_ms(getattr(self._backend, "config", None))
        args = (query, sources, excluded, roles, limit, offset, order, bool(include_inactive), with_context, with_snippet)
        hits = await self._search_query("search_messages_rows", args, (slow_ms,))
        if projection is not None:
            hits = [{f: hit[f] for f in projection if f in hit} for hit in hits]
        return hits

    async def _search_query(self, name: str, args: tuple[Any, ...], tail: tuple[Any, ...]) -> Any:
        """:meth:`_with_fts_repair` under the search deadline (``sessions.search_timeout_ms``)."""
        timeout_ms = _timeout_ms(getattr(self._backend, "config", None))
        if not 0 < timeout_ms < float("inf"):
            return await self._with_fts_repair(name, args, tail)
        deadline = Deadline(timeout_ms / 1000.0)
        try:
            return await self._with_fts_repair(name, args, tail)
        except asyncio.CancelledError:
            if deadline.expired():
                raise SearchTimeoutError(timeout_ms) from None
            raise
        finally:
            deadline.cancel()

    async def _with_fts_repair(self, name: str, args: tuple[Any, ...], tail: tuple[Any, ...]) -> Any:
        """Run search query ``name`` with ``args``, ``repairable`` and ``tail``; a corrupt index is rebuilt once."""
        repairable = not self.read_only and not getattr(self, "_search_fts_repaired", False)
        try:
            return await self._query(name, *args, repairable, *tail)
        except FtsRepairNeeded as exc:
            # One in-place rebuild per instance, through the writer; then ask again.
            self._search_fts_repaired = True
            log.warning("search met a corrupt FTS index (%s); rebuilding it in place", exc)
            try:
                await self._write(RepairFtsIndexes())
            except Exception as repair_error:  # noqa: BLE001 - the retry below reports what remains
                log.error("in-place FTS rebuild failed: %s", repair_error)
            return await self._query(name, *args, False, *tail)

    async def count_search_matches(
        self,
        query: str,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        include_inactive: bool = False,
        cap: int = 1000,
    ) -> int:
        """How many messages :meth:`search_messages` finds for ``query`` with these filters, over all
        its pages; returns an int, at most ``cap`` (a result equal to ``cap`` means "``cap`` or more").

        Same query, routes and filters as ``search_messages`` (a hit count for
        a results page); the count stops at ``cap`` so a very common word
        costs no more than ``cap`` rows. ``[]``-giving queries count 0. The
        search deadline (``sessions.search_timeout_ms``) applies as to a search.
        """
        sources, excluded, roles = _query_filters(query, source_filter, exclude_sources, role_filter)
        cap = _non_negative(cap, "cap")
        await self._ensure_open()
        if not query or not query.strip() or cap == 0:
            return 0
        args = (query, sources, excluded, roles, bool(include_inactive), cap)
        return int(await self._search_query("count_search_rows", args, ()))

    # ------------------------------------------------------------ sessions

    async def search_sessions(
        self,
        source: str | None = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """List every session (children and archived included), most recently active first.

        Not a text search. ``workspace_key`` keeps sessions whose
        ``git_repo_root`` equals it, or (without a repo root) whose ``cwd`` is
        it or lies under it. Rows are ``get_session`` dicts plus ``last_active``.
        """
        return await self._query(
            "search_sessions_rows",
            opt_text(source, "source"),
            _non_negative(limit, "limit"),
            _non_negative(offset, "offset"),
            opt_text(workspace_key, "workspace_key"),
        )

    async def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: str | None = None,
        sources: list[str] | None = None,
        exclude_sources: list[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Sessions whose id matches ``query`` (case-insensitive): exact first, then prefix, then substring.

        Returns at most ``limit`` rows in the ``list_sessions_rich`` shape;
        ``[]`` for a blank query or ``limit <= 0``.
        """
        needle = (opt_text(query, "query") or "").strip().lower()
        limit = count_arg(limit, "limit")
        if not needle or limit <= 0:
            return []
        lister: Callable[..., Any] | None = getattr(self, "list_sessions_rich", None)
        if lister is not None:
            rows = await lister(
                source=source,
                sources=sources,
                exclude_sources=exclude_sources,
                limit=min(limit * 4, INT64_MAX),
                offset=0,
                include_archived=bool(include_archived),
                order_by_last_active=True,
                id_query=needle,
            )
        else:
            wanted = (opt_text(source, "source"),) if source else _names(sources, "sources")
            rows = await self._query(
                "session_ids_matching",
                needle,
                min(limit * 4, INT64_MAX),
                bool(include_archived),
                wanted,
                _names(exclude_sources, "exclude_sources"),
            )
        ranked = sorted(enumerate(rows), key=lambda item: (_id_rank(item[1], needle), item[0]))
        return [row for _, row in ranked[:limit]]

    # -------------------------------------------------------- index upkeep

    async def _rebuild_status(self, prefix: str) -> dict[str, Any] | None:
        high, progress = await self._query("fts_markers", prefix)
        if high is None:
            return None
        try:
            total = int(high)
            indexed = int(progress or 0)
        except (TypeError, ValueError):
            return None
        if total <= 0:
            return None
        return {"pending": True, "total": total, "indexed": indexed, "percent": min(100, int(100 * indexed / total))}

    async def fts_rebuild_status(self) -> dict[str, Any] | None:
        """Progress of a deferred FTS backfill: ``{pending, total, indexed, percent}``, or None when none is pending."""
        return await self._rebuild_status("fts_rebuild")

    async def fts_cjk_rebuild_status(self) -> dict[str, Any] | None:
        """Like :meth:`fts_rebuild_status` for the CJK index's backfill."""
        return await self._rebuild_status("fts_cjk_rebuild")

    async def _rebuild_step(self, cjk: bool) -> bool:
        await self._ensure_open()
        if self.read_only:
            return False
        try:
            return bool(await self._write(FtsRebuildStep(cjk=cjk)))
        except OperationalError as exc:
            log.debug("FTS backfill chunk failed (will retry): %s", exc)
            return True

    async def fts_rebuild_step(self) -> bool:
        """Index the next 500 rows of a deferred FTS backfill; returns True while rows remain.

        The last chunk re-checks the rows around the high-water mark and
        clears the backfill markers. A chunk that hits a transient error
        returns True (call again).
        """
        return await self._rebuild_step(False)

    async def fts_cjk_rebuild_step(self) -> bool:
        """Like :meth:`fts_rebuild_step` for the CJK index (False when its tokenizer is not loaded)."""
        return await self._rebuild_step(True)

    async def fts_optimize_available(self) -> bool:
        """True when :meth:`optimize_fts_storage` has work: a legacy layout, a pending
        backfill, a pending or stale CJK index, demoted tables, or an empty index over messages."""
        await self._ensure_open()
        if self.read_only:
            return False
        return bool(await self._query("fts_optimize_pending"))

    async def optimize_fts_storage(
        self,
        *,
        progress_cb: Callable[[dict[str, Any]], None] | None = None,
        vacuum: bool = True,
    ) -> dict[str, Any]:
        """Migrate a legacy FTS layout and finish every pending backfill and teardown.

        Resumable: each step is its own short write, so other writers keep
        going and an interrupted run continues where it stopped.
        ``progress_cb`` receives ``{phase, percent, indexed, total}``.
        Returns ``{"ok": True, "vacuumed": bool | None}`` or ``{"ok": False,
        "reason": ..., ...}`` with reason ``fts5_unavailable``, ``read_only``,
        ``backfill_incomplete`` or ``teardown_incomplete``.
        """
        await self._ensure_open()
        layout = await self._query("fts_layout_name")
        if layout == "unavailable":
            return {"ok": False, "reason": "fts5_unavailable"}
        if self.read_only:
            return {"ok": False, "reason": "read_only"}
        await self._write(RepairOptimizeBookkeeping())
        pending = await self.fts_rebuild_status() is not None
        if layout == "legacy" and not pending:
            await self._write(DemoteLegacyFts())
        elif pending and layout != "legacy":
            await self._write(EnsureFtsTables())
        await self._write(ResetStaleCjkIndex())

        async def emit(phase: str) -> None:
            if progress_cb is None:
                return
            status = await self.fts_rebuild_status() or await self.fts_cjk_rebuild_status()
            progress_cb(
                {
                    "phase": phase,
                    "percent": status["percent"] if status else 100,
                    "indexed": status["indexed"] if status else 0,
                    "total": status["total"] if status else 0,
                }
            )

        await emit("backfill")
        await self._run_steps(lambda: self._write(FtsRebuildStep()), emit, "backfill")
        await self._run_steps(lambda: self._write(FtsRebuildStep(cjk=True)), emit, "backfill")
        await emit("teardown")
        await self._run_steps(lambda: self._write(FtsTrashTeardownStep()), emit, "teardown")

        reason = await self._query("fts_storage_unsettled")
        if reason is not None:
            log.warning("FTS storage optimization did not settle (%s)", reason)
            return {"ok": False, "reason": reason, "vacuumed": None}
        vacuumed = None
        if vacuum:
            await emit("vacuum")
            vacuumed = bool(await self._write(CompactDatabase()))
        refusal = await self._write(SettleFtsStorage())
        if refusal is not None:
            return {"ok": False, "reason": refusal, "vacuumed": vacuumed}
        await emit("done")
        return {"ok": True, "vacuumed": vacuumed}

    async def _run_steps(self, step: Callable[[], Any], emit: Callable[[str], Any], phase: str) -> None:
        # Each step is one short write; a pause proportional to its duration
        # leaves the writer free for everyone else most of the time.
        failures = 0
        while failures < MAX_FAILED_STEPS:
            started = time.monotonic()
            try:
                more = await step()
                failures = 0
            except OperationalError as exc:
                log.debug("FTS maintenance step failed (will retry): %s", exc)
                failures += 1
                more = True
            if not more:
                return
            await emit(phase)
            await asyncio.sleep(min(0.05, (time.monotonic() - started) * 0.25))

    async def optimize_fts(self) -> int:
        """Merge each FTS index into one segment (FTS5 ``'optimize'``); returns how many succeeded."""
        return int(await self._write(OptimizeFts()))

    async def rebuild_fts(self) -> int:
        """Rebuild each present FTS index from ``messages`` (FTS5 ``'rebuild'``); returns how many succeeded."""
        return int(await self._write(RebuildFts()))
