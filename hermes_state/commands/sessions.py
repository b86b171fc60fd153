"""Commands that create, change or remove session rows."""

from __future__ import annotations

from typing import Any

from .base import Command


class UpsertSession(Command, frozen=True):
    """Insert a session, or fill the NULL columns of an existing one.

    ``system_prompt`` travels with its SHA-256 ``system_prompt_hash`` so the
    handler can store the de-duplicated prompt row in the same transaction.
    """

    session_id: str
    source: str
    started_at: float
    model: str | None = None
    model_config: str | None = None
    system_prompt: str | None = None
    system_prompt_hash: str | None = None
    user_id: str | None = None
    session_key: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    thread_id: str | None = None
    parent_session_id: str | None = None
    cwd: str | None = None
    profile_name: str | None = None
    git_repo_root: str | None = None
    origin_json: str | None = None
    display_name: str | None = None
    # Other session columns (``tables.SESSION_EXTRA_COLUMNS``) as (name, value) pairs, set only on a new row.
    columns: tuple[tuple[str, Any], ...] = ()


class ReopenSession(Command, frozen=True):
    """Clear ``ended_at``/``end_reason`` (tagging legacy reset children first)."""

    session_id: str


class EndSession(Command, frozen=True):
    """End a session; the first end reason wins."""

    session_id: str
    end_reason: str
    ended_at: float


class DeleteSession(Command, frozen=True):
    """Delete a session, its delegate descendants and their messages.

    Resolves to the list of deleted ids (empty when nothing was deleted).
    """

    session_id: str
    expected_delete_ids: tuple[str, ...] | None = None


class UpdateSessionMeta(Command, frozen=True):
    """Overwrite ``model_config`` verbatim; keep the model when ``model`` is None."""

    session_id: str
    model_config_json: str | None
    model: str | None = None


class UpdateSessionModel(Command, frozen=True):
    """Switch the model: drop the browser model lock and the prompt reference."""

    session_id: str
    model: str


class UpdateSystemPrompt(Command, frozen=True):
    """Point a session at a (de-duplicated) system prompt, or at none."""

    session_id: str
    system_prompt: str | None
    system_prompt_hash: str | None
