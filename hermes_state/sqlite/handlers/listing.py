"""Handlers for session metadata, activity labels and single-message edits."""

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
from ..queries.listing import parse_model_config
from .common import gc_prompts
from .registry import handles


@handles(UpdateSessionCwd)
def update_session_cwd(conn: Any, cmd: UpdateSessionCwd) -> None:
    sets: list[str] = ["cwd = ?"]
    params: list[str | None] = [cmd.cwd]
    for column, value in (("git_branch", cmd.git_branch), ("git_repo_root", cmd.git_repo_root)):
        if value or cmd.replace_git_meta:
            sets.append(f"{column} = ?")
            params.append(value or None)
    conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (*params, cmd.session_id))


@handles(PatchModelConfig)
def patch_model_config(conn: Any, cmd: PatchModelConfig) -> bool:
    row = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (cmd.session_id,)).fetchone()
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
        conn.execute(
            "UPDATE sessions SET model_config = ?, model = COALESCE(?, model), "
            "system_prompt = NULL, system_prompt_hash = NULL WHERE id = ?",
            (merged, cmd.runtime_lock_model, cmd.session_id),
        )
        gc_prompts(conn)
    else:
        conn.execute("UPDATE sessions SET model_config = ? WHERE id = ?", (merged, cmd.session_id))
    return True


@handles(UpdateBillingRoute)
def update_billing_route(conn: Any, cmd: UpdateBillingRoute) -> None:
    conn.execute(
        "UPDATE sessions SET billing_provider = ?, billing_base_url = ?, billing_mode = COALESCE(?, billing_mode), "
        "system_prompt = NULL, system_prompt_hash = NULL WHERE id = ?",
        (cmd.provider, cmd.base_url, cmd.billing_mode, cmd.session_id),
    )
    gc_prompts(conn)


@handles(BackfillRepoRoots)
def backfill_repo_roots(conn: Any, cmd: BackfillRepoRoots) -> int:
    changed = 0
    for cwd, root in cmd.pairs:
        cur = conn.execute(
            "UPDATE sessions SET git_repo_root = ? WHERE cwd = ? AND COALESCE(git_repo_root, '') = ''", (root, cwd)
        )
        changed += max(cur.rowcount, 0)
    return changed


@handles(TouchSessionActivity)
def touch_session_activity(conn: Any, cmd: TouchSessionActivity) -> bool:
    cur = conn.execute(
        "UPDATE sessions SET last_activity_at = ?, last_activity_description = ?, last_activity_provenance = ? "
        "WHERE id = ? AND (last_activity_at IS NULL OR last_activity_at < ?)",
        (cmd.at, cmd.description, cmd.provenance, cmd.session_id, cmd.at),
    )
    return cur.rowcount > 0


@handles(ClearSessionActivityLabels)
def clear_session_activity_labels(conn: Any, cmd: ClearSessionActivityLabels) -> bool:
    cur = conn.execute(
        "UPDATE sessions SET last_activity_description = '', last_activity_provenance = 'unknown' "
        "WHERE id = ? AND (COALESCE(last_activity_description, '') <> '' "
        "OR COALESCE(last_activity_provenance, 'unknown') NOT IN ('', 'unknown'))",
        (cmd.session_id,),
    )
    return cur.rowcount > 0


@handles(ClearMessages)
def clear_messages(conn: Any, cmd: ClearMessages) -> None:
    conn.execute("DELETE FROM messages WHERE session_id = ?", (cmd.session_id,))
    conn.execute("UPDATE sessions SET message_count = 0, tool_call_count = 0 WHERE id = ?", (cmd.session_id,))


@handles(SetLatestUserApiContent)
def set_latest_user_api_content(conn: Any, cmd: SetLatestUserApiContent) -> int:
    cur = conn.execute(
        "UPDATE messages SET api_content = ? WHERE id = (SELECT id FROM messages WHERE session_id = ? "
        "AND role = 'user' AND active = 1 ORDER BY id DESC LIMIT 1) AND content IS ?",
        (cmd.api_content, cmd.session_id, cmd.content),
    )
    return max(cur.rowcount, 0)
