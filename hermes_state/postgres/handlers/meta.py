"""Handlers for ``state_meta``."""

from __future__ import annotations

from typing import Any

from ...commands.meta import SetMeta
from .registry import handles


@handles(SetMeta)
async def set_meta(conn: Any, cmd: SetMeta) -> None:
    await conn.execute(
        "INSERT INTO state_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        cmd.key, cmd.value,
    )
