"""Commands for compression leases, compaction, child sessions, cooldowns and rewind."""

from __future__ import annotations

from typing import Literal

from .base import Command
from .leases import TurnFence
from .messages import MessageRow

# The two per-session integers the compressor keeps between turns.
CompressionCounter = Literal["compression_fallback_streak", "compression_ineffective_count"]


class AcquireCompressionLock(Command, frozen=True):
    """Claim the session's compression lease unless a live holder owns it.

    Expired leases and leases whose ``pid=<N>`` holder process is gone are
    reclaimed first. Resolves to ``(acquired, reclaimed_holder)``.
    """

    session_id: str
    holder: str
    ttl_seconds: float


class RefreshCompressionLock(Command, frozen=True):
    """Push the lease's expiry to now + ttl if ``holder`` still owns the row (expired or not)."""

    session_id: str
    holder: str
    ttl_seconds: float


class ReleaseCompressionLock(Command, frozen=True):
    """Delete the lease row when ``holder`` owns it."""

    session_id: str
    holder: str


class ArchiveAndCompact(Command, frozen=True):
    """Archive the active transcript (``active=0, compacted=1``) and insert ``rows`` in its place.

    ``model_config_patch`` is JSON text of an object: each key is set, or
    removed when its value is null. With ``watermark``, active rows with a
    larger id (appended while the summary was written) are archived too and
    cloned after ``rows``. With ``lock_holder``, the session's compression
    lease must still be that holder's and live. Resolves to the number of
    rows inserted (summary plus cloned tail).
    """

    session_id: str
    rows: tuple[MessageRow, ...]
    model_config_patch: str | None = None
    watermark: int | None = None
    lock_holder: str | None = None
    fence: TurnFence | None = None


class PublishCompressionChild(Command, frozen=True):
    """Create the continuation session with ``rows`` and end the parent with reason ``compression``."""

    parent_session_id: str
    child_session_id: str
    source: str
    rows: tuple[MessageRow, ...]
    model: str | None = None
    model_config: str | None = None
    system_prompt: str | None = None
    system_prompt_hash: str | None = None
    cwd: str | None = None
    profile_name: str | None = None
    compression_lock_holder: str | None = None
    require_compression_lease: bool = True
    # The parent's active rows above ``watermark`` (and at most ``watermark_ceiling``) are cloned into the child.
    watermark: int | None = None
    watermark_ceiling: int | None = None
    fence: TurnFence | None = None


class ReopenOrphanedCompressionSession(Command, frozen=True):
    """Reopen a compression-ended session that never got a continuation. Resolves to a bool."""

    session_id: str


class FinalizeOrphanedCompressionSessions(Command, frozen=True):
    """End never-used continuation children older than ``cutoff``. Resolves to the count ended."""

    cutoff: float


class SetCompressionCooldown(Command, frozen=True):
    """Store (or with both None, clear) the compression-failure cooldown columns.

    With ``require_row`` a missing session raises ``RuntimeError`` (the
    snapshot-restore path); otherwise it is a no-op.
    """

    session_id: str
    cooldown_until: float | None
    error: str | None
    require_row: bool = False


class SetCompressionCounter(Command, frozen=True):
    """Set one of the compressor's per-session counters (already clamped to >= 0)."""

    session_id: str
    column: CompressionCounter
    value: int


class RewindToMessage(Command, frozen=True):
    """Deactivate a user message and every later active row; count the rewind.

    Resolves to ``{rewound_count, target_message, new_head_id}``.
    """

    session_id: str
    target_message_id: int
    fence: TurnFence | None = None


class RestoreRewound(Command, frozen=True):
    """Reactivate the session's inactive rows with ``id >= since_message_id``. Resolves to the count."""

    session_id: str
    since_message_id: int
