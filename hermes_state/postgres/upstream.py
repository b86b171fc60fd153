"""async-hermes-agent's PostgreSQL layouts, and the data steps that move their rows onto ours.

Upstream (SQLAlchemy Core over asyncpg, later psycopg) kept a JSON snapshot
beside the real columns: ``sessions.payload`` (the whole session dict),
``messages.payload`` (the append arguments) and ``session_model_usage.payload``.
Its readers took the snapshot and laid columns over it (spec postgres.md §4.5),
so some values lived only in the snapshot:

* a message's structured content: the ``content`` column held
  ``json.dumps(value)`` and the reader returned the snapshot's non-string
  ``content`` instead; here it becomes ``content_kind`` JSON, as our writer
  stores it;
* ``sessions.model`` and ``sessions.cwd``, read from the snapshot alone at
  every upstream commit, and ``title`` at the anchor (before the unique title
  index existed); later commits read ``title`` from its column;
* any other column a direct UPDATE left NULL while the snapshot kept a value
  (the reader then showed the snapshot's).

Once those are in columns the snapshots hold nothing a reader needs, and they
are dropped (with ``sessions.last_active``, which nothing here maintains, and
the usage rows' identity ``id``, replaced by the composite key our upserts
name). Dropped rather than kept writable (NOT NULL lifted, no longer
written): nothing here would read them, so they would go stale at the first
write, and an upstream process still pointed at the database would read the
stale copy (its readers start from the snapshot) where, with the columns
gone, upstream from 0d6ee3e28 on refuses the database outright. They also
held a second copy of every message, and ``get_session`` returns every
column of ``sessions``. The steps run inside :func:`.migration.ensure_schema`'s transaction,
before the columns are dropped; a row whose snapshot is not JSON (or not an
object) keeps its columns, as upstream's reader did.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

from ..encoding import encode_content
from .clock import DB_NOW
from .content import JSON, to_columns

__all__ = [
    "UPSTREAM_COLUMNS",
    "UPSTREAM_ONLY",
    "content_from_payloads",
    "live_leases",
    "merge_usage_rows",
    "null_usage_keys",
    "sessions_from_payloads",
]

# Every column of upstream's tables over its history (anchor 1137dcd83 to 71d9c845e,
# spec postgres.md §3.1 and upstream-2026-08.md §4.2): ``hidden`` from storage 4,
# ``session_turn_leases`` from storage 5.
UPSTREAM_COLUMNS: dict[str, frozenset[str]] = {
    "schema_version": frozenset({"version"}),
    "system_prompts": frozenset({"hash", "prompt"}),
    "sessions": frozenset({
        "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name",
        "origin_json", "expiry_finalized", "model", "model_config", "system_prompt", "system_prompt_hash",
        "payload", "started_at", "ended_at", "end_reason", "parent_session_id", "message_count",
        "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "git_branch", "git_repo_root", "billing_provider", "billing_base_url",
        "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
        "pricing_version", "archived", "pinned", "last_read_at", "last_active", "title", "title_source", "cwd",
        "last_activity_at", "last_activity_description", "last_activity_provenance", "api_call_count",
        "handoff_state", "handoff_platform", "handoff_error", "compression_failure_cooldown_until",
        "compression_failure_error", "compression_fallback_streak", "compression_ineffective_count",
        "profile_name", "rewind_count", "hidden",
    }),
    "messages": frozenset({
        "id", "session_id", "payload", "role", "content", "tool_call_id", "tool_calls", "tool_name",
        "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
        "reasoning_details", "codex_reasoning_items", "codex_message_items", "platform_message_id", "observed",
        "active", "compacted", "api_content", "display_kind", "display_metadata",
    }),
    "session_model_usage": frozenset({
        "id", "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task",
        "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
        "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source", "first_seen",
        "last_seen", "payload",
    }),
    "state_meta": frozenset({"key", "value"}),
    "compression_locks": frozenset({"session_id", "holder", "acquired_at", "expires_at"}),
    "session_turn_leases": frozenset({"conversation_id", "holder", "acquired_at", "expires_at"}),
    # storage 3: SQLite's columns, then three of PostgreSQL's own (kept; this store neither reads
    # nor writes them, and they are nullable or have a default)
    "async_delegations": frozenset({
        "delegation_id", "origin_session", "origin_ui_session_id", "parent_session_id", "state", "dispatched_at",
        "completed_at", "updated_at", "event_json", "result_json", "delivery_state", "delivery_attempts",
        "delivered_at", "owner_pid", "owner_started_at", "task_json", "delivery_claim", "delivery_claimed_at",
        "origin_session_id", "owner_instance_id", "lease_expires_at",
    }),
}
# Upstream columns this layout drops once their values are in columns of ours.
UPSTREAM_ONLY: dict[str, tuple[str, ...]] = {
    "sessions": ("payload", "last_active"),
    "messages": ("payload",),
    "session_model_usage": ("id", "payload"),
}

# How upstream's reader built a session dict from the snapshot (spec postgres.md §4.5):
# these columns replaced the snapshot's value only when not NULL ...
_OVERLAID = (
    "user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json",
    "model_config", "system_prompt", "end_reason", "git_branch", "git_repo_root", "billing_provider",
    "billing_base_url", "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
    "pricing_version", "last_activity_at", "last_activity_description",
    "last_activity_provenance", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error", "profile_name",
)
# ... these were read from the snapshot alone ...
_SNAPSHOT_ONLY = ("model", "cwd")
# ... and the title with its source from the snapshot at the anchor, from the columns once the
# unique title index existed (its repair nulled both columns of duplicates, not the snapshot).
_TITLE = ("title", "title_source")
# ... and the rest (ids, times, counters, flags; NOT NULL counters always overlaid) from the column.
_REAL_COLUMNS = frozenset({"estimated_cost_usd", "actual_cost_usd", "last_activity_at", "compression_failure_cooldown_until"})

_BATCH = 5000


def _snapshot(text: str | None) -> dict[str, Any] | None:
    """The snapshot as a dict, or None when it is missing, not JSON or not an object (upstream read {} then)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _column_value(name: str, value: Any) -> tuple[bool, Any]:
    """(usable, value) for a snapshot value going into column ``name``."""
    if value is None:
        return True, None
    if name in _REAL_COLUMNS:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return True, float(value)
        return False, None
    if isinstance(value, str):
        return True, value
    # upstream wrote dict values (model_config) into its TEXT columns as JSON text
    return True, json.dumps(value, default=str)


async def _keyset(conn: Any, select: str, key: str, cast: str) -> AsyncIterator[list[Any]]:
    """The rows of ``select`` (a statement with a WHERE clause) in batches, in ``key`` order.

    Keyset pages rather than a cursor, so the caller may write between batches.
    """
    rows = await conn.fetch(f"{select} ORDER BY {key} LIMIT {_BATCH}")
    while rows:
        yield rows
        rows = await conn.fetch(f"{select} AND {key} > $1::{cast} ORDER BY {key} LIMIT {_BATCH}", rows[-1][key])


async def sessions_from_payloads(conn: Any, *, title_from_snapshot: bool) -> int:
    """Put into columns what upstream's session reader took from the snapshot; returns the values changed.

    ``title_from_snapshot``: the anchor read ``title`` from the snapshot only.
    """
    snapshot_only = (*_SNAPSHOT_ONLY, *_TITLE) if title_from_snapshot else _SNAPSHOT_ONLY
    names = (*snapshot_only, *_OVERLAID)
    columns = ", ".join(f'"{name}"' for name in names)
    changes: dict[str, tuple[list[str], list[Any]]] = {}
    select = f"SELECT id, payload, {columns} FROM sessions WHERE payload IS NOT NULL"
    async for rows in _keyset(conn, select, "id", "text"):
        for row in rows:
            snapshot = _snapshot(row["payload"])
            if snapshot is None:
                continue
            for name in names:
                if name not in snapshot or (name in _OVERLAID and row[name] is not None):
                    continue
                usable, value = _column_value(name, snapshot[name])
                if usable and value != row[name]:
                    ids, values = changes.setdefault(name, ([], []))
                    ids.append(row["id"])
                    values.append(value)
    for name, (ids, values) in changes.items():
        kind = "double precision" if name in _REAL_COLUMNS else "text"
        await conn.execute(
            f'UPDATE sessions AS s SET "{name}" = u.v FROM unnest($1::text[], $2::{kind}[]) AS u(id, v) WHERE s.id = u.id',
            ids, values,
        )
    return sum(len(ids) for ids, _ in changes.values())


# Upstream stored structured content as ``json.dumps(value)`` in ``content``: text that starts
# like a JSON array, object, number or literal. Only those rows need their snapshot read.
_MAYBE_JSON = r"^([[{0-9-]|true$|false$|NaN$|Infinity$)"


def _stored_content(value: Any) -> tuple[int, str | None]:
    """``(content_kind, content)`` for a structured value, as our writer stores it."""
    try:
        kind, text, _ = to_columns(encode_content(value))
    except (TypeError, ValueError):
        # NaN, an integer beyond 64 bits, deeper nesting than our writer accepts: upstream
        # stored it, and the JSON decoder reads this text back to the same value.
        return JSON, json.dumps(value)
    return kind, text


async def content_from_payloads(conn: Any) -> int:
    """Give structured content (kept only in upstream's snapshot) its content kind; returns the rows changed."""
    changed = 0
    select = f"SELECT id, payload FROM messages WHERE payload IS NOT NULL AND content ~ '{_MAYBE_JSON}'"
    async for rows in _keyset(conn, select, "id", "bigint"):
        ids: list[int] = []
        kinds: list[int] = []
        texts: list[str | None] = []
        for row in rows:
            snapshot = _snapshot(row["payload"])
            if snapshot is None or "content" not in snapshot or isinstance(snapshot["content"], str):
                continue  # upstream's reader returned the column for these
            kind, text = _stored_content(snapshot["content"])
            ids.append(row["id"])
            kinds.append(kind)
            texts.append(text)
        if ids:
            await conn.execute(
                "UPDATE messages AS m SET content_kind = u.kind, content = u.text, content_bytes = NULL "
                "FROM unnest($1::bigint[], $2::smallint[], $3::text[]) AS u(id, kind, text) WHERE m.id = u.id",
                ids, kinds, texts,
            )
            changed += len(ids)
    return changed


_USAGE_KEY = ("model", "billing_provider", "billing_base_url", "billing_mode", "task")
_USAGE_COUNTERS = (
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
)
_INT64_MAX = 2**63 - 1


async def null_usage_keys(conn: Any) -> None:
    """A NULL key part of a usage row becomes '' (upstream matched rows on ``coalesce(part, '')``)."""
    nulls = " OR ".join(f"{c} IS NULL" for c in _USAGE_KEY)
    assignments = ", ".join(f"{c} = COALESCE({c}, '')" for c in _USAGE_KEY)
    await conn.execute(f"UPDATE session_model_usage SET {assignments} WHERE {nulls}")


async def merge_usage_rows(conn: Any) -> None:
    """Sum usage rows that share a key into the oldest (upstream's ``id`` still present, counters BIGINT).

    Upstream had no constraint on the key, only a lock; the composite primary
    key added next needs one row per key. Counters saturate like our writer's;
    the newest cost labels are kept.
    """
    key = ", ".join(("session_id", *_USAGE_KEY))
    same_key = " AND ".join(f"u.{c} = g.{c}" for c in ("session_id", *_USAGE_KEY))
    sums = ", ".join(f"LEAST(sum({c}), {_INT64_MAX})::bigint AS {c}" for c in _USAGE_COUNTERS)
    latest = ", ".join(
        f"(array_agg({c} ORDER BY last_seen DESC NULLS LAST, id DESC) FILTER (WHERE {c} IS NOT NULL))[1] AS {c}"
        for c in ("cost_status", "cost_source")
    )
    merged = ", ".join(
        f"{c} = g.{c}"
        for c in (*_USAGE_COUNTERS, "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
                  "first_seen", "last_seen")
    )
    await conn.execute(
        f"WITH g AS (SELECT {key}, min(id) AS keeper, {sums}, "
        "sum(estimated_cost_usd) AS estimated_cost_usd, sum(actual_cost_usd) AS actual_cost_usd, "
        f"{latest}, min(first_seen) AS first_seen, max(last_seen) AS last_seen "
        f"FROM session_model_usage GROUP BY {key} HAVING count(*) > 1), "
        f"kept AS (UPDATE session_model_usage AS u SET {merged} FROM g WHERE u.id = g.keeper) "
        f"DELETE FROM session_model_usage AS u USING g WHERE {same_key} AND u.id <> g.keeper"
    )


async def live_leases(conn: Any) -> None:
    """Keep upstream's live turn leases, each with a fencing token; drop the expired ones (they grant nothing).

    A kept row names no host (``holder_host`` NULL), so only its TTL or its
    holder's release ends it: upstream's holder strings identify no process
    here. Upstream keyed leases by the compression root, which is the
    conversation id of every continuation here too.
    """
    await conn.execute(f"DELETE FROM session_turn_leases WHERE expires_at <= {DB_NOW}")
    await conn.execute("UPDATE session_turn_leases SET token = nextval('session_turn_lease_tokens')")
