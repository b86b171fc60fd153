"""Handlers that create, change and delete session rows."""

from __future__ import annotations

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
from .common import gc_prompts, require_session, store_prompt
from .registry import handles

# Columns the upsert fills only while the stored value is NULL.
_FILL_ONLY = (
    "model", "system_prompt_hash", "session_key", "chat_id", "chat_type", "thread_id",
    "parent_session_id", "cwd", "profile_name", "git_repo_root", "origin_json", "display_name",
)
_INSERT_COLUMNS = ("id", "source", "user_id", "started_at", "model_config", *_FILL_ONLY)

_UPSERT_SQL = (
    f"INSERT INTO sessions ({', '.join(_INSERT_COLUMNS)}) VALUES ({', '.join('?' * len(_INSERT_COLUMNS))}) "
    "ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{c} = COALESCE(sessions.{c}, excluded.{c})" for c in _FILL_ONLY)
    + ", model_config = ?"
    + ", system_prompt = CASE WHEN sessions.system_prompt_hash IS NULL AND excluded.system_prompt_hash IS NOT NULL"
    " THEN NULL ELSE sessions.system_prompt END"
)

@handles(UpsertSession)
def upsert_session(conn: Any, cmd: UpsertSession) -> str:
    if cmd.parent_session_id is not None:
        require_session(conn, cmd.parent_session_id, what="parent session")
    store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    stored = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
    config = cmd.model_config if stored is None else merged_model_config(stored[0], cmd.model_config)
    values = [cmd.session_id, cmd.source, cmd.user_id, cmd.started_at, config]
    values.extend(getattr(cmd, c) for c in _FILL_ONLY)
    conn.execute(_UPSERT_SQL, (*values, config))
    if stored is None and cmd.columns:
        names = extra_column_names(cmd.columns)
        conn.execute(
            f"UPDATE sessions SET {', '.join(f'{n} = ?' for n in names)} WHERE id = ?",
            (*(value for _, value in cmd.columns), cmd.session_id),
        )
    if cmd.parent_session_id is not None:
        _inherit_from_parent(conn, cmd.session_id)
    if cmd.system_prompt is not None:
        gc_prompts(conn)
    return cmd.session_id


_WORKSPACE_FIELDS = ("cwd", "git_repo_root", "git_branch", "profile_name")
_IDENTITY_FIELDS = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json")


def _inherit_from_parent(conn: Any, session_id: str) -> None:
    """Fill the child's NULL workspace fields (and, after compression, its identity) from the parent."""
    fields = _WORKSPACE_FIELDS + _IDENTITY_FIELDS
    parent = conn.execute(
        f"SELECT p.end_reason, {', '.join('p.' + f for f in fields)} FROM sessions AS c "
        "JOIN sessions AS p ON p.id = c.parent_session_id WHERE c.id = ?",
        (session_id,),
    ).fetchone()
    if parent is None:
        return
    inherited = fields if parent[0] == "compression" else _WORKSPACE_FIELDS
    values = dict(zip(fields, parent[1:]))
    conn.execute(
        f"UPDATE sessions SET {', '.join(f'{f} = COALESCE({f}, ?)' for f in inherited)} WHERE id = ?",
        (*(values[f] for f in inherited), session_id),
    )


@handles(ReopenSession)
def reopen_session(conn: Any, cmd: ReopenSession) -> None:
    marks = ", ".join("?" * len(RESET_REASONS))
    conn.execute(
        f"""
        UPDATE sessions SET model_config = json_set(
                CASE WHEN json_valid(model_config) THEN model_config ELSE '{{}}' END,
                '$._reset_from', parent_session_id)
        WHERE parent_session_id = ?1
          AND (model_config IS NULL OR NOT json_valid(model_config)
               OR json_extract(model_config, '$._reset_from') IS NULL)
          AND COALESCE(session_key, '') <> ''
          AND EXISTS (SELECT 1 FROM sessions AS p WHERE p.id = ?1
                      AND p.end_reason IN ({marks}) AND p.session_key = sessions.session_key)
        """,
        (cmd.session_id, *RESET_REASONS),
    )
    conn.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", (cmd.session_id,))


@handles(EndSession)
def end_session(conn: Any, cmd: EndSession) -> None:
    conn.execute(
        "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
        (cmd.ended_at, cmd.end_reason, cmd.session_id),
    )


_DELEGATE_FROM = "CASE WHEN json_valid(model_config) THEN json_extract(model_config, '$._delegate_from') END"


def delete_targets(conn: Any, session_id: str) -> list[str]:
    """``[session_id, *sorted delegate descendants]``, or ``[]`` for an unknown id."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        return []
    found: set[str] = set()
    frontier = [session_id]
    while frontier:
        marks = ", ".join("?" * len(frontier))
        rows = conn.execute(
            f"SELECT id FROM sessions WHERE {_DELEGATE_FROM} IN ({marks}) "
            f"OR (parent_session_id IN ({marks}) AND {_DELEGATE_FROM} IS NOT NULL)",
            (*frontier, *frontier),
        ).fetchall()
        frontier = [r[0] for r in rows if r[0] != session_id and r[0] not in found]
        found.update(frontier)
    return [session_id, *sorted(found)]


def delete_sessions_by_id(conn: Any, ids: list[str]) -> None:
    """Detach every child, then delete the sessions' messages and rows; GC prompts.

    The turn lease of a conversation left without sessions goes too (a
    conversation whose tip survives keeps its lease).
    """
    conversations: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        conversations.update(
            r[0] for r in conn.execute(
                f"SELECT COALESCE(conversation_id, id) FROM sessions WHERE id IN ({marks})", chunk
            )
        )
        conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM sessions WHERE id IN ({marks})", chunk)
    gone = sorted(conversations)
    for start in range(0, len(gone), 500):
        chunk = gone[start : start + 500]
        conn.execute(
            f"DELETE FROM session_turn_leases WHERE conversation_id IN ({', '.join('?' * len(chunk))}) "
            "AND NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.conversation_id = session_turn_leases.conversation_id)",
            chunk,
        )
    gc_prompts(conn)


@handles(DeleteSession)
def delete_session(conn: Any, cmd: DeleteSession) -> list[str]:
    targets = delete_targets(conn, cmd.session_id)
    if not targets:
        return []
    if cmd.expected_delete_ids is not None and set(cmd.expected_delete_ids) != set(targets):
        return []
    delete_sessions_by_id(conn, targets)
    return targets


@handles(UpdateSessionMeta)
def update_session_meta(conn: Any, cmd: UpdateSessionMeta) -> None:
    conn.execute(
        "UPDATE sessions SET model_config = ?, model = COALESCE(?, model) WHERE id = ?",
        (cmd.model_config_json, cmd.model, cmd.session_id),
    )


@handles(UpdateSessionModel)
def update_session_model(conn: Any, cmd: UpdateSessionModel) -> None:
    conn.execute(
        """
        UPDATE sessions SET model = ?,
            model_config = CASE WHEN model_config IS NOT NULL AND json_valid(model_config)
                                THEN json_remove(model_config, '$.browser_model_lock') ELSE model_config END,
            system_prompt = NULL, system_prompt_hash = NULL
        WHERE id = ?
        """,
        (cmd.model, cmd.session_id),
    )
    gc_prompts(conn)


@handles(UpdateSystemPrompt)
def update_system_prompt(conn: Any, cmd: UpdateSystemPrompt) -> None:
    store_prompt(conn, cmd.system_prompt, cmd.system_prompt_hash)
    conn.execute(
        "UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL WHERE id = ?",
        (cmd.system_prompt_hash, cmd.session_id),
    )
    gc_prompts(conn)
