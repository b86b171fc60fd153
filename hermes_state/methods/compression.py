"""Compression leases, in-place compaction, child sessions, lineage and resume."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from .. import conversation
from ..commands.compression import (
    AcquireCompressionLock,
    ArchiveAndCompact,
    CompressionCounter,
    FinalizeOrphanedCompressionSessions,
    PublishCompressionChild,
    RefreshCompressionLock,
    ReleaseCompressionLock,
    ReopenOrphanedCompressionSession,
    RestoreRewound,
    RewindToMessage,
    SetCompressionCooldown,
    SetCompressionCounter,
)
from ..encoding import encode_message_dicts, hashed_prompt
from ..errors import DatabaseError
from ..facade import StoreBase, opt_number, opt_text, require_id, rows_size
from ..limits import finite_arg, int64_arg, json_text
from ..previews import parse_model_config
from ..rules import RESET_REASONS
from ..turn_fence import transcript_fence

__all__ = ["CompressionMethods", "child_relation"]

log = logging.getLogger("hermes_state")

# Continuation children never used within a week are ended by the orphan sweep.
ORPHAN_CHILD_AGE_SECONDS = 7 * 86400.0
DEFAULT_MAX_RESUME_MESSAGES = 20000


def _blank(value: Any, name: str) -> bool:
    """True for None or ""; raises TypeError for a non-string."""
    if value is None or value == "":
        return True
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return False


def _ttl(value: Any) -> float:
    seconds = opt_number(value, "ttl_seconds")
    if seconds is None or not math.isfinite(seconds):
        raise ValueError("ttl_seconds must be a finite number of seconds")
    return seconds


_row_id = int64_arg


def _json_object(value: Any, name: str) -> str:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, not {type(value).__name__}")
    return json_text(value, name)


def _counter(value: Any, name: str) -> int:
    """A non-negative counter: ints as given, finite floats truncated, negatives as 0."""
    if isinstance(value, float):
        value = int(finite_arg(value, name))
    return max(0, int64_arg(value, name))


def child_relation(parent: Mapping[str, Any], child: Mapping[str, Any]) -> str:
    """How ``child`` relates to ``parent`` (rows with ``end_reason``, ``ended_at``, ``session_key``; the child's ``model_config``).

    Explicit markers first (delegate, branch, reset), then tool runs, then
    what the parent's ending says: a continuation of a compression-ended
    parent, a child started after a /branch ended it, or a reset child
    sharing its session key. The same reading as listings and lineage walks.
    """
    config = parse_model_config(child.get("model_config"))
    if config.get("_delegate_from") is not None:
        return "delegate"
    if config.get("_branched_from") is not None:
        return "branch"
    if config.get("_reset_from") is not None:
        return "reset"
    if (child.get("source") or "") == "tool":
        return "tool"
    reason = parent.get("end_reason")
    if reason == "compression":
        return "compression"
    ended = parent.get("ended_at")
    if reason == "branched" and ended is not None and (child.get("started_at") or 0) >= ended:
        return "branch"
    key = child.get("session_key") or ""
    if reason in RESET_REASONS and key and key == parent.get("session_key"):
        return "reset"
    return "child"


_CHILD_KEYS = ("id", "source", "title", "model", "started_at", "ended_at", "end_reason", "message_count")


def _child_row(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    row = {key: child.get(key) for key in _CHILD_KEYS}
    row["relation"] = child_relation(parent, child)
    return row


class CompressionMethods(StoreBase):
    """Compression leases, in-place compaction, child sessions, lineage and resume."""

    # ------------------------------------------------------------------ leases

    async def try_acquire_compression_lock(self, session_id: str, holder: str, ttl_seconds: float = 300.0) -> bool:
        """Take the session's compression lease for ``ttl_seconds``; returns whether ``holder`` now owns it.

        An expired lease, or one whose ``pid=<N>`` holder process is gone, is
        reclaimed first. Holding the lease already returns True without
        extending it (use :meth:`refresh_compression_lock`). Empty arguments
        and database errors return False; a closed store raises.
        """
        if _blank(session_id, "session_id") or _blank(holder, "holder"):
            return False
        command = AcquireCompressionLock(session_id=session_id, holder=holder, ttl_seconds=_ttl(ttl_seconds))
        try:
            acquired, reclaimed = await self._write(command)
        except DatabaseError as exc:
            log.warning("try_acquire_compression_lock(%s) failed: %s", session_id, exc)
            return False
        if reclaimed:
            log.warning("reclaimed stale compression lease of session %s (holder %s)", session_id, reclaimed)
        return bool(acquired)

    async def refresh_compression_lock(self, session_id: str, holder: str, ttl_seconds: float = 300.0) -> bool:
        """Set the lease's expiry to now + ``ttl_seconds``; returns False unless ``holder`` owns the row.

        A lease that expired but was not reclaimed yet is revived.
        """
        if _blank(session_id, "session_id") or _blank(holder, "holder"):
            return False
        command = RefreshCompressionLock(session_id=session_id, holder=holder, ttl_seconds=_ttl(ttl_seconds))
        try:
            return bool(await self._write(command))
        except DatabaseError as exc:
            log.warning("refresh_compression_lock(%s) failed: %s", session_id, exc)
            return False

    async def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Drop the lease if ``holder`` owns it (someone else's lease is left alone). Returns None."""
        if _blank(session_id, "session_id") or _blank(holder, "holder"):
            return
        try:
            await self._write(ReleaseCompressionLock(session_id=session_id, holder=holder))
        except DatabaseError as exc:
            log.warning("release_compression_lock(%s) failed: %s", session_id, exc)

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        """Return the holder of the session's unexpired lease, or None."""
        if _blank(session_id, "session_id"):
            return None
        return await self._query("compression_lock_holder", session_id, time.time())

    # -------------------------------------------------------------- compaction

    async def get_active_message_watermark(self, session_id: str) -> int:
        """Return the id of the session's newest active message (0 for none, an unknown or an empty id).

        Read it before a slow summary call and hand it to
        :meth:`archive_and_compact` (``watermark=``) or
        :meth:`publish_compression_child` (``watermark=``/``watermark_ceiling=``):
        rows appended after it are then kept after the summary instead of lost.
        """
        if _blank(session_id, "session_id"):
            return 0
        return int(await self._query("active_message_watermark", session_id))

    async def archive_and_compact(
        self,
        session_id: str,
        compacted_messages: list[dict[str, Any]],
        model_config_patch: dict[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
        *,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Compact the transcript in place; returns the rows inserted (summary plus any cloned tail).

        In one transaction the active rows become archived (``active=0,
        compacted=1``, still searchable), the given messages are inserted as
        the new active transcript and the counters are reset to them. With
        ``watermark`` (from :meth:`get_active_message_watermark`, read before
        the summary was made), the active rows appended after it are archived
        too and cloned after the summary, so nothing written meanwhile is
        lost; ``watermark=None`` archives everything as before. With
        ``lock_holder``, :class:`~hermes_state.SessionCompressionInProgressError`
        is raised at once (nothing changes) unless that holder's compression
        lease is still live. A ``model_config_patch`` sets each key (None
        removes it); with a patch an unknown session raises
        ``RuntimeError("Session not found: <id>")``. ``turn_lease_holder``
        fences the write as for :meth:`append_message`.
        """
        session_id = require_id(session_id)
        patch = None if model_config_patch is None else _json_object(model_config_patch, "model_config_patch")
        mark = None if watermark is None else _row_id(watermark, "watermark")
        holder = opt_text(lock_holder, "lock_holder")
        rows = encode_message_dicts(compacted_messages, dump_sidecars=True)
        command = ArchiveAndCompact(
            session_id=session_id, rows=rows, model_config_patch=patch, watermark=mark, lock_holder=holder,
            fence=transcript_fence(turn_lease_holder, turn_lease_ttl_seconds),
        )
        return await self._write(command, size=rows_size(rows))

    async def publish_compression_child(
        self,
        *,
        parent_session_id: str,
        child_session_id: str,
        source: str,
        messages: list[dict[str, Any]],
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        compression_lock_holder: str | None = None,
        require_compression_lease: bool = True,
        watermark: int | None = None,
        watermark_ceiling: int | None = None,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> None:
        """Continue the conversation in a new child session and end the parent. Returns None.

        Atomic: the child row (identity and workspace copied from the
        parent), its transcript and the parent's end (reason
        ``compression``) commit together. With ``watermark``, the parent's
        active rows above it (and at most ``watermark_ceiling``, read just
        before the compressor flushed its own rows, which the handoff already
        holds) are cloned into the child after the handoff; the parent keeps
        them. Rows someone else appends after the ceiling was read stay only
        in the ended parent: fence the turn (``turn_lease_holder``) to rule
        that out. Raises :class:`~hermes_state.CompressionSessionBusyError`
        when the lease is not held by ``compression_lock_holder`` (unless
        ``require_compression_lease=False``), ``RuntimeError`` for an empty
        handoff or a missing or already ended parent, and
        :class:`~hermes_state.SessionTurnLeaseLostError` for a lost turn lease.
        """
        watermark = None if watermark is None else _row_id(watermark, "watermark")
        watermark_ceiling = None if watermark_ceiling is None else _row_id(watermark_ceiling, "watermark_ceiling")
        fence = transcript_fence(turn_lease_holder, turn_lease_ttl_seconds)
        if not messages:
            raise RuntimeError("Compression child handoff must not be empty")

        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        prompt = opt_text(system_prompt, "system_prompt")
        config = None
        if model_config:
            config = _json_object(model_config, "model_config")
        rows = encode_message_dicts(messages, dump_sidecars=True)
        command = PublishCompressionChild(
            parent_session_id=require_id(parent_session_id, "parent_session_id"),
            child_session_id=require_id(child_session_id, "child_session_id"),
            source=source,
            rows=rows,
            model=opt_text(model, "model"),
            model_config=config,
            system_prompt=prompt,
            system_prompt_hash=hashed_prompt(prompt),
            cwd=opt_text(cwd, "cwd"),
            profile_name=opt_text(profile_name, "profile_name"),
            compression_lock_holder=opt_text(compression_lock_holder, "compression_lock_holder"),
            require_compression_lease=bool(require_compression_lease),
            watermark=watermark,
            watermark_ceiling=watermark_ceiling,
            fence=fence,
        )
        await self._write(command, size=rows_size(rows))

    # ------------------------------------------------------ resume and lineage

    async def get_compression_tip(self, session_id: str) -> str:
        """Return the live tip of the session's compression chain (the session itself when none)."""
        return await self._query("compression_tip_id", require_id(session_id))

    async def resolve_resume_session_id(self, session_id: str) -> str:
        """Return the session a resume should load.

        That is the compression tip, or the deepest plain (non-fork)
        descendant of it that holds messages. An empty id is returned as is.
        """
        if _blank(session_id, "session_id"):
            return session_id
        return await self._query("resume_target_id", session_id)

    async def get_compression_lineage(self, session_id: str) -> list[str]:
        """Return the ids of the session's compression lineage, root first.

        ``[]`` for an unknown session; ``[session_id]`` for an explicit fork
        (tool, branch, delegate or reset child) or a session outside a chain.
        """
        return await self._query("compression_lineage_ids", require_id(session_id))

    async def get_child_sessions(self, session_id: str) -> list[dict[str, Any]]:
        """Return the session's direct children, oldest first (``[]`` for an unknown or childless session).

        Each dict has ``id, source, title, model, started_at, ended_at,
        end_reason, message_count`` and ``relation``: ``"compression"`` (the
        continuation of a parent that ended with compression), ``"branch"``,
        ``"delegate"``, ``"reset"``, ``"tool"`` or ``"child"`` (any other
        parent link). This store's addition; the reference has no such read.
        """
        parent, children = await self._query("child_session_rows", require_id(session_id))
        return [_child_row(parent, child) for child in children]

    async def get_conversation_root(self, session_id: str) -> str:
        """Return the topmost ancestor through any parent link (the session itself when it has none)."""
        if _blank(session_id, "session_id"):
            return session_id
        return await self._query("conversation_root_id", session_id)

    def _max_resume_messages(self) -> int:
        config = getattr(self._backend, "config", None)
        sessions = getattr(config, "sessions", None)
        return int(getattr(sessions, "max_resume_messages", DEFAULT_MAX_RESUME_MESSAGES))

    async def _resume_limit(self, max_messages: Any) -> int:
        if max_messages is None:
            await self._ensure_open()
            return self._max_resume_messages()
        value = int64_arg(max_messages, "max_messages")
        if value < 0:
            raise ValueError("max_messages must be non-negative")
        return value

    async def get_resume_message_count(self, session_id: str) -> int:
        """Return how many active rows a full resume loads: exactly the rows :meth:`get_resume_conversations` reads.

        Those are the session's and its ancestors', except that the walk
        stops at a /branch session (truthy ``model_config._branched_from``):
        a branch owns its transcript, so its parent's rows are not counted.
        """
        return await self._query("resume_message_count", require_id(session_id))

    async def assert_resume_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """Raise :class:`~hermes_state.SessionResumeTooLargeError` when a resume would load too much.

        ``max_messages`` defaults to config ``sessions.max_resume_messages``
        (20000); 0 disables the guard. Returns the number of active rows a
        resume loads (bounded by the limit when there is one), counted as
        :meth:`get_resume_message_count` counts them.
        """
        session_id = require_id(session_id)
        limit = await self._resume_limit(max_messages)
        if limit == 0:
            return await self._query("resume_message_count", session_id)
        return await self._query("resume_size_check", session_id, limit)

    async def get_resume_conversations(self, session_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return ``(model_history, display_history)`` for resuming ``session_id``.

        ``model_history`` is the session's own active transcript with the
        alternation repair; ``display_history`` is the whole ancestor chain
        with replayed user turns dropped, up to and including the nearest
        /branch session (a branch owns its transcript: its parent's rows are
        not shown). Both carry ``_row_id``. Enforces :meth:`assert_resume_safe` first.
        """
        session_id = require_id(session_id)
        rows = await self._query("resume_rows", session_id, await self._resume_limit(None))
        own = [row for row in rows if row["session_id"] == session_id]
        model = conversation.build_conversation(own, include_row_ids=True, repair_alternation=True)
        display = conversation.build_conversation(rows, include_ancestors=True, include_row_ids=True)
        return model, display

    async def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """Return the display messages that come from the session's ancestors only (no ``_row_id``).

        ``[]`` for a /branch session, which owns its transcript.
        """
        session_id = require_id(session_id)
        rows = await self._query("resume_rows", session_id, 0)
        ancestors = [row for row in rows if row["session_id"] != session_id]
        return conversation.build_conversation(ancestors, include_ancestors=True) if ancestors else []

    async def find_live_compression_child(self, parent_session_id: str) -> dict[str, Any] | None:
        """Return the one open continuation of a compression-ended session (``get_session`` shape).

        None when the parent did not end by compression or when there are
        zero or several open continuations (ambiguity fails closed).
        """
        if _blank(parent_session_id, "parent_session_id"):
            return None
        return await self._query("live_compression_child", parent_session_id)

    async def reopen_orphaned_compression_session(self, session_id: str) -> bool:
        """Reopen a compression-ended session whose handoff never happened; returns whether it reopened.

        Refuses (False) when any continuation child exists or a lease is
        still live; an expired lease row is removed in the same transaction.
        """
        if _blank(session_id, "session_id"):
            return False
        return bool(await self._write(ReopenOrphanedCompressionSession(session_id=session_id)))

    async def finalize_orphaned_compression_sessions(self) -> int:
        """End week-old, never-billed continuation children that hold messages; returns how many.

        Their end reason becomes ``orphaned_compression``; nothing is deleted.
        """
        cutoff = time.time() - ORPHAN_CHILD_AGE_SECONDS
        return int(await self._write(FinalizeOrphanedCompressionSessions(cutoff=cutoff)))

    # ---------------------------------------------------- cooldowns and counters

    async def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        """Return ``{cooldown_until, remaining_seconds, error}`` of a running cooldown, else None."""
        if _blank(session_id, "session_id"):
            return None
        row = await self._query("compression_cooldown_row", session_id)
        until = row["cooldown_until"]
        if until is None:
            return None
        remaining = until - time.time()
        if remaining <= 0:
            return None
        return {"cooldown_until": until, "remaining_seconds": remaining, "error": row["error"]}

    async def get_compression_failure_cooldown_row(self, session_id: str) -> dict[str, Any]:
        """Return the stored cooldown columns as ``{session_exists, cooldown_until, error}`` (no expiry filter)."""
        if _blank(session_id, "session_id"):
            return {"session_exists": False, "cooldown_until": None, "error": None}
        return await self._query("compression_cooldown_row", session_id)

    async def restore_compression_failure_cooldown_row(self, session_id: str, snapshot: Mapping[str, Any]) -> None:
        """Put back a row read by :meth:`get_compression_failure_cooldown_row` and verify it. Returns None.

        Raises ``RuntimeError`` when the session appeared or vanished since
        the snapshot, or when the row reads back differently.
        """
        session_id = require_id(session_id)
        if not isinstance(snapshot, Mapping):
            raise TypeError(f"snapshot must be a mapping, not {type(snapshot).__name__}")
        if not snapshot.get("session_exists", False):
            if (await self.get_compression_failure_cooldown_row(session_id))["session_exists"]:
                raise RuntimeError("cannot restore absent compression cooldown row: session now exists")
            return
        until = opt_number(snapshot.get("cooldown_until"), "snapshot['cooldown_until']")
        error = opt_text(snapshot.get("error"), "snapshot['error']")
        await self._write(SetCompressionCooldown(session_id=session_id, cooldown_until=until, error=error, require_row=True))
        expected = {"session_exists": True, "cooldown_until": until, "error": error}
        actual = await self.get_compression_failure_cooldown_row(session_id)
        if actual != expected:
            raise RuntimeError(
                f"compression cooldown rollback verification failed: expected={expected!r}, actual={actual!r}"
            )

    async def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> None:
        """Store a compression-failure cooldown ending at ``cooldown_until`` (epoch seconds). Returns None."""
        if _blank(session_id, "session_id"):
            return
        until = opt_number(cooldown_until, "cooldown_until")
        await self._write(SetCompressionCooldown(session_id=session_id, cooldown_until=until, error=opt_text(error, "error")))

    async def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """Remove the session's compression-failure cooldown. Returns None."""
        if _blank(session_id, "session_id"):
            return
        await self._write(SetCompressionCooldown(session_id=session_id, cooldown_until=None, error=None))

    async def _get_counter(self, session_id: str, column: CompressionCounter) -> int:
        if _blank(session_id, "session_id"):
            return 0
        return await self._query("compression_counter", session_id, column)

    async def _set_counter(self, session_id: str, column: CompressionCounter, value: Any, name: str) -> None:
        if _blank(session_id, "session_id"):
            return
        await self._write(SetCompressionCounter(session_id=session_id, column=column, value=_counter(value, name)))

    async def get_compression_fallback_streak(self, session_id: str) -> int:
        """Return the stored fallback-summary streak (0 for unknown sessions)."""
        return await self._get_counter(session_id, "compression_fallback_streak")

    async def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Store the fallback-summary streak (negative values store 0). Returns None."""
        await self._set_counter(session_id, "compression_fallback_streak", streak, "streak")

    async def get_compression_ineffective_count(self, session_id: str) -> int:
        """Return the stored count of ineffective compactions (0 for unknown sessions)."""
        return await self._get_counter(session_id, "compression_ineffective_count")

    async def set_compression_ineffective_count(self, session_id: str, count: int) -> None:
        """Store the count of ineffective compactions (negative values store 0). Returns None."""
        await self._set_counter(session_id, "compression_ineffective_count", count, "count")

    # ------------------------------------------------------------------ rewind

    async def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> dict[str, Any]:
        """Hide a user message and everything after it; returns ``{rewound_count, target_message, new_head_id}``.

        ``target_message`` is the decoded row as it was before the rewind
        (``display_metadata`` stays the stored JSON text, as in the
        reference), ``new_head_id`` the newest row still active (None when none is).
        Raises ``ValueError`` when the id is not in the session or is not a
        user message. The counters are not changed; ``rewind_count`` grows by one.
        ``turn_lease_holder`` fences the write as for :meth:`append_message`.
        """
        command = RewindToMessage(
            session_id=require_id(session_id), target_message_id=_row_id(target_message_id, "target_message_id"),
            fence=transcript_fence(turn_lease_holder, turn_lease_ttl_seconds),
        )
        return await self._write(command)

    async def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Reactivate the session's inactive rows with ``id >= since_message_id``; returns how many."""
        command = RestoreRewound(
            session_id=require_id(session_id), since_message_id=_row_id(since_message_id, "since_message_id")
        )
        return int(await self._write(command))
