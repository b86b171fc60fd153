"""Handlers that create, change and delete session rows (same rules as ``sqlite.handlers.sessions``).

``model_config`` is free text that is usually JSON; PostgreSQL 15 has no
``json_valid``, so the JSON edits SQLite does in SQL happen here in Python,
written back compactly as SQLite's json functions write them.
"""

from __future__ import annotations

import json
from typing import Any

from ...commands.sessions import (
    DeleteSession,
    EndSession,
    ReopenSession,
    UpdateSessionMeta,
    UpdateSessionModel,
    UpdateSystemPrompt,
    UpsertSession,
)
from ...rules import RESET_REASONS, merged_model_config
from ...tables import extra_column_names
from .common import compact_json, gc_prompts, require_session, store_prompt
from .registry import handles

# Columns the upsert fills only while the stored value is NULL.
_FILL_ONLY = (
    "model", "system_prompt_hash", "session_key", "chat_id", "chat_type", "thread_id",
    "parent_session_id", "cwd", "profile_name", "git_repo_root", "origin_json", "display_name",
)
_INSERT_COLUMNS = ("id", "source", "user_id", "started_at", "model_config", *_FILL_ONLY)
_UPSERT_SQL = (
    f"INSERT INTO sessions ({', '.join(_INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(_INSERT_COLUMNS) + 1))}) "
    "ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = COALESCE(sessions.{c}, excluded.{c})" for c in _FILL_ONLY)
    + ", model_config = excluded.model_config"
    + ", system_prompt = CASE WHEN sessions.system_prompt_hash IS NULL AND excluded.system_prompt_hash IS NOT NULL"
    " THEN NULL ELSE sessions.system_prompt END"
    # xmax is 0 on a row this statement inserted (another process may have created it since the SELECT).
    " RETURNING xmax = 0"
)
_WORKSPACE_FIELDS = ("cwd", "git_repo_root", "git_branch", "profile_name")
_IDENTITY_FIELDS = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json")


def _json_object(text: str | None) -> dict[str, Any] | None:
    """The decoded object, or None when ``text`` is not JSON (SQLite's json_valid is false)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        return None
    return value if isinstance(value, dict) else None


@handles(UpsertSession)
async def upsert_session(conn: Any, cmd: UpsertSession) -> str:
    if cmd.parent_session_id is not None:
        await require_session(conn, cmd.parent_session_id, what="parent session")
    await store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    stored = await conn.fetchrow("SELECT model_config FROM sessions WHERE id = $1", cmd.session_id)
    config = cmd.model_config if stored is None else merged_model_config(stored[0], cmd.model_config)
    values = [cmd.session_id, cmd.source, cmd.user_id, cmd.started_at, config]
    values.extend(getattr(cmd, c) for c in _FILL_ONLY)
    inserted = await conn.fetchval(_UPSERT_SQL, *values)
    if inserted and cmd.columns:
        names = extra_column_names(cmd.columns)
        sets = ", ".join(f"{n} = ${i}" for i, n in enumerate(names, 2))
        await conn.execute(f"UPDATE sessions SET {sets} WHERE id = $1", cmd.session_id, *(v for _, v in cmd.columns))
    if cmd.parent_session_id is not None:
        await _inherit_from_parent(conn, cmd.session_id)
    if cmd.system_prompt is not None:
        await gc_prompts(conn)
    return cmd.session_id


async def _inherit_from_parent(conn: Any, session_id: str) -> None:
    """Fill the child's NULL workspace fields (and, after compression, its identity) from the parent."""
    fields = _WORKSPACE_FIELDS + _IDENTITY_FIELDS
    parent = await conn.fetchrow(
        f"SELECT p.end_reason, {', '.join('p.' + f for f in fields)} FROM sessions AS c "
        "JOIN sessions AS p ON p.id = c.parent_session_id WHERE c.id = $1",
        session_id,
    )
    if parent is None:
        return
    inherited = fields if parent[0] == "compression" else _WORKSPACE_FIELDS
    values = dict(zip(fields, list(parent)[1:]))
    sets = ", ".join(f"{f} = COALESCE({f}, ${i})" for i, f in enumerate(inherited, 2))
    await conn.execute(f"UPDATE sessions SET {sets} WHERE id = $1", session_id, *(values[f] for f in inherited))


@handles(ReopenSession)
async def reopen_session(conn: Any, cmd: ReopenSession) -> None:
    # Tag legacy reset children (same session_key, parent ended by a reset) before reopening.
    children = await conn.fetch(
        "SELECT c.id, c.model_config FROM sessions AS c JOIN sessions AS p ON p.id = c.parent_session_id "
        "WHERE c.parent_session_id = $1 AND COALESCE(c.session_key, '') <> '' "
        "AND p.end_reason = ANY($2::text[]) AND p.session_key = c.session_key",
        cmd.session_id, list(RESET_REASONS),
    )
    for child_id, text in children:
        config = _json_object(text)
        if text is not None and config is not None and config.get("_reset_from") is not None:
            continue
        if config is None and text is not None and _valid_json(text):
            continue  # valid JSON that is not an object: json_set would fail in SQLite too; leave it
        tagged = dict(config or {})
        tagged["_reset_from"] = cmd.session_id
        await conn.execute("UPDATE sessions SET model_config = $1 WHERE id = $2", compact_json(tagged), child_id)
    await conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = $1", cmd.session_id)


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@handles(EndSession)
async def end_session(conn: Any, cmd: EndSession) -> None:
    await conn.execute(
        "UPDATE sessions SET ended_at = $1, end_reason = $2 WHERE id = $3 AND ended_at IS NULL",
        cmd.ended_at, cmd.end_reason, cmd.session_id,
    )


async def delete_targets(conn: Any, session_id: str) -> list[str]:
    """``[session_id, *sorted delegate descendants]``, or ``[]`` for an unknown id."""
    if await conn.fetchval("SELECT 1 FROM sessions WHERE id = $1", session_id) is None:
        return []
    # Only rows that mention the marker can be delegates; the JSON is checked here.
    delegates: list[tuple[str, str | None, Any]] = []
    for row in await conn.fetch(
        "SELECT id, parent_session_id, model_config FROM sessions WHERE strpos(model_config, '_delegate_from') > 0"
    ):
        config = _json_object(row[2])
        if config is not None and config.get("_delegate_from") is not None:
            delegates.append((row[0], row[1], config["_delegate_from"]))
    found: set[str] = set()
    frontier = {session_id}
    while frontier:
        step = {
            sid for sid, parent, origin in delegates
            if (origin in frontier or parent in frontier) and sid != session_id and sid not in found
        }
        found.update(step)
        frontier = step
    return [session_id, *sorted(found)]


async def delete_sessions_by_id(conn: Any, ids: list[str]) -> None:
    """Detach every child, then delete the sessions' messages and rows; GC prompts.

    The turn lease of a conversation left without sessions goes too (a
    conversation whose tip survives keeps its lease).
    """
    await conn.execute("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ANY($1::text[])", ids)
    await conn.execute("DELETE FROM messages WHERE session_id = ANY($1::text[])", ids)
    await conn.execute(
        "WITH gone AS (DELETE FROM sessions WHERE id = ANY($1::text[]) RETURNING COALESCE(conversation_id, id) AS cid) "
        "DELETE FROM session_turn_leases AS l USING (SELECT DISTINCT cid FROM gone) AS g "
        "WHERE l.conversation_id = g.cid AND NOT EXISTS "
        "(SELECT 1 FROM sessions AS s WHERE s.conversation_id = g.cid AND s.id <> ALL($1::text[]))",
        ids,
    )
    await gc_prompts(conn)


@handles(DeleteSession)
async def delete_session(conn: Any, cmd: DeleteSession) -> list[str]:
    targets = await delete_targets(conn, cmd.session_id)
    if not targets:
        return []
    if cmd.expected_delete_ids is not None and set(cmd.expected_delete_ids) != set(targets):
        return []
    await delete_sessions_by_id(conn, targets)
    return targets


@handles(UpdateSessionMeta)
async def update_session_meta(conn: Any, cmd: UpdateSessionMeta) -> None:
    await conn.execute(
        "UPDATE sessions SET model_config = $1, model = COALESCE($2, model) WHERE id = $3",
        cmd.model_config_json, cmd.model, cmd.session_id,
    )


@handles(UpdateSessionModel)
async def update_session_model(conn: Any, cmd: UpdateSessionModel) -> None:
    text = await conn.fetchval("SELECT model_config FROM sessions WHERE id = $1", cmd.session_id)
    config = _json_object(text)
    if config is not None:
        config.pop("browser_model_lock", None)
        text = compact_json(config)
    await conn.execute(
        "UPDATE sessions SET model = $1, model_config = $2, system_prompt = NULL, system_prompt_hash = NULL "
        "WHERE id = $3",
        cmd.model, text, cmd.session_id,
    )
    await gc_prompts(conn)


@handles(UpdateSystemPrompt)
async def update_system_prompt(conn: Any, cmd: UpdateSystemPrompt) -> None:
    await store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    await conn.execute(
        "UPDATE sessions SET system_prompt_hash = $1, system_prompt = NULL WHERE id = $2",
        cmd.system_prompt_hash, cmd.session_id,
    )
    await gc_prompts(conn)
