"""Handlers for session metadata, activity labels and single-message edits (as ``sqlite.handlers.listing``)."""

from __future__ import annotations

import json
from typing import Any

from ...commands.listing import (
    BackfillRepoRoots,
    ClearMessages,
    ClearSessionActivityLabels,
    PatchModelConfig,
    SetLatestUserApiContent,
    TouchSessionActivity,
    UpdateBillingRoute,
    UpdateSessionCwd,
)
from ...previews import parse_model_config
from ..content import to_columns
from .common import gc_prompts
from .registry import handles


def rows_changed(status: str) -> int:
    """Rows an INSERT/UPDATE/DELETE touched, from asyncpg's command status (``"UPDATE 3"``)."""
    return int(status.rsplit(" ", 1)[-1])


@handles(UpdateSessionCwd)
async def update_session_cwd(conn: Any, cmd: UpdateSessionCwd) -> None:
    values: list[str | None] = [cmd.cwd]
    sets = ["cwd = $1"]
    for column, value in (("git_branch", cmd.git_branch), ("git_repo_root", cmd.git_repo_root)):
        if value or cmd.replace_git_meta:
            values.append(value or None)
            sets.append(f"{column} = ${len(values)}")
    await conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ${len(values) + 1}", *values, cmd.session_id)


@handles(PatchModelConfig)
async def patch_model_config(conn: Any, cmd: PatchModelConfig) -> bool:
    row = await conn.fetchrow("SELECT model_config FROM sessions WHERE id = $1", cmd.session_id)
    if row is None:
        return False
    config = parse_model_config(row[0])
    for key, value in json.loads(cmd.patch_json).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    merged = json.dumps(config) if config else None
    if cmd.runtime_lock:
        # A runtime lock changes the model the prompt footer names: drop the prompt.
        await conn.execute(
            "UPDATE sessions SET model_config = $1, model = COALESCE($2, model), "
            "system_prompt = NULL, system_prompt_hash = NULL WHERE id = $3",
            merged, cmd.runtime_lock_model, cmd.session_id,
        )
        await gc_prompts(conn)
    else:
        await conn.execute("UPDATE sessions SET model_config = $1 WHERE id = $2", merged, cmd.session_id)
    return True


@handles(UpdateBillingRoute)
async def update_billing_route(conn: Any, cmd: UpdateBillingRoute) -> None:
    await conn.execute(
        "UPDATE sessions SET billing_provider = $1, billing_base_url = $2, billing_mode = COALESCE($3, billing_mode), "
        "system_prompt = NULL, system_prompt_hash = NULL WHERE id = $4",
        cmd.provider, cmd.base_url, cmd.billing_mode, cmd.session_id,
    )
    await gc_prompts(conn)


@handles(BackfillRepoRoots)
async def backfill_repo_roots(conn: Any, cmd: BackfillRepoRoots) -> int:
    changed = 0
    for cwd, root in cmd.pairs:
        status = await conn.execute(
            "UPDATE sessions SET git_repo_root = $1 WHERE cwd = $2 AND COALESCE(git_repo_root, '') = ''", root, cwd
        )
        changed += rows_changed(status)
    return changed


@handles(TouchSessionActivity)
async def touch_session_activity(conn: Any, cmd: TouchSessionActivity) -> bool:
    status = await conn.execute(
        "UPDATE sessions SET last_activity_at = $1, last_activity_description = $2, last_activity_provenance = $3 "
        "WHERE id = $4 AND (last_activity_at IS NULL OR last_activity_at < $1)",
        cmd.at, cmd.description, cmd.provenance, cmd.session_id,
    )
    return rows_changed(status) > 0


@handles(ClearSessionActivityLabels)
async def clear_session_activity_labels(conn: Any, cmd: ClearSessionActivityLabels) -> bool:
    status = await conn.execute(
        "UPDATE sessions SET last_activity_description = '', last_activity_provenance = 'unknown' "
        "WHERE id = $1 AND (COALESCE(last_activity_description, '') <> '' "
        "OR COALESCE(last_activity_provenance, 'unknown') NOT IN ('', 'unknown'))",
        cmd.session_id,
    )
    return rows_changed(status) > 0


@handles(ClearMessages)
async def clear_messages(conn: Any, cmd: ClearMessages) -> None:
    await conn.execute("DELETE FROM messages WHERE session_id = $1", cmd.session_id)
    await conn.execute("UPDATE sessions SET message_count = 0, tool_call_count = 0 WHERE id = $1", cmd.session_id)


@handles(SetLatestUserApiContent)
async def set_latest_user_api_content(conn: Any, cmd: SetLatestUserApiContent) -> int:
    kind, text, raw = to_columns(cmd.content)
    status = await conn.execute(
        "UPDATE messages SET api_content = $1 WHERE id = (SELECT id FROM messages WHERE session_id = $2 "
        "AND role = 'user' AND active = 1 ORDER BY id DESC LIMIT 1) "
        "AND content_kind = $3 AND content IS NOT DISTINCT FROM $4 AND content_bytes IS NOT DISTINCT FROM $5",
        cmd.api_content, cmd.session_id, kind, text, raw,
    )
    return rows_changed(status)
