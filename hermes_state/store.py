"""``SessionDB``: the public facade over a backend and the single-writer actor.

Every write method checks its arguments here, in the caller's task, encodes
them into a frozen command and awaits the actor; nothing malformed is ever
queued. Every read method goes straight to the backend's reader. The
constructor does no I/O and binds no event loop: the first awaited call opens
the database.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from . import conversation
from .commands import (
    AppendMessages,
    DeleteSession,
    EndSession,
    PopMessage,
    RecordAuxiliaryUsage,
    ReopenSession,
    ReplaceMessages,
    SetMeta,
    UpdateSessionMeta,
    UpdateSessionModel,
    UpdateSystemPrompt,
    UpdateTokenCounts,
    UpsertSession,
)
from .encoding import encode_message_args, encode_message_dicts, encode_text_turn, hashed_prompt
from .facade import TRANSCRIPT_PATIENCE, StoreBase, count_arg, opt_number, opt_text, require_id, rows_size
from .limits import NOT_JSON, check_json_value, int64_arg, json_text, parse_json_text
from .methods.compression import CompressionMethods
from .methods.health import HealthMethods
from .methods.leases import TurnLeaseMethods
from .turn_fence import transcript_fence
from .methods.listing import ListingMethods
from .methods.maintenance import MaintenanceMethods
from .methods.rows import RowMethods
from .methods.search import SearchMethods
from .methods.titles import TitleMethods
from .methods.usage import UsageMethods
from .tables import SESSION_EXTRA_COLUMNS, stored_value

__all__ = ["SessionDB"]

log = logging.getLogger("hermes_state")


def _extra_columns(columns: dict[str, Any]) -> dict[str, Any]:
    """``create_session``'s other session columns, checked (None values left out, as the column defaults).

    Raises TypeError for an unknown name or a value of the wrong kind.
    """
    checked: dict[str, Any] = {}
    for name, value in columns.items():
        kind = SESSION_EXTRA_COLUMNS.get(name)
        if kind is None:
            raise TypeError(f"create_session() got an unexpected keyword argument {name!r}")
        value = TitleMethods.sanitize_title(value) if name == "title" else stored_value(kind, value, name)
        if value is not None:
            checked[name] = value
    return checked


class CoreMethods(StoreBase):
    """Sessions, messages, token accounting and metadata: the core transcript API."""

    # ------------------------------------------------------------------ sessions

    def _upsert_command(
        self, session_id: Any, source: Any, fields: dict[str, Any], columns: dict[str, Any] | None = None
    ) -> UpsertSession:
        session_id = require_id(session_id)
        extra = _extra_columns(columns or {})
        started_at = extra.pop("started_at", None)
        if not isinstance(source, str):
            raise TypeError(f"source must be a str, not {type(source).__name__}")
        for name, value in fields.items():
            if name != "model_config":
                opt_text(value, name)
        config = fields.pop("model_config")
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"model_config must be a dict or None, not {type(config).__name__}")
        config_json = json_text(config, "model_config") if config else None
        parent = fields.get("parent_session_id")
        if parent is not None:
            require_id(parent, "parent_session_id")
        prompt = fields.pop("system_prompt")

        return UpsertSession(
            session_id=session_id,
            source=source,
            started_at=time.time() if started_at is None else started_at,
            model_config=config_json,
            system_prompt=prompt,
            system_prompt_hash=hashed_prompt(prompt),
            columns=tuple(extra.items()),
            **fields,
        )

    async def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
        parent_session_id: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        git_repo_root: str | None = None,
        origin_json: str | None = None,
        display_name: str | None = None,
        **columns: Any,
    ) -> str:
        """Create the session, or fill the NULL fields of an existing one; returns ``session_id``.

        ``source``, ``user_id`` and ``started_at`` never change once set. A
        ``parent_session_id`` that does not exist raises
        :class:`~hermes_state.SessionNotFoundError` (an ``sqlite3.IntegrityError``).
        Other session columns may be given as keywords (``title=``,
        ``started_at=``, ``end_reason=``, token counts, ...: the names in
        ``hermes_state.tables.SESSION_EXTRA_COLUMNS``), as async-hermes-agent's
        PostgreSQL store took them: they are written only when this call
        creates the row. Any other keyword raises ``TypeError``.
        """
        fields = dict(
            model=model, model_config=model_config, system_prompt=system_prompt, user_id=user_id,
            session_key=session_key, chat_id=chat_id, chat_type=chat_type, thread_id=thread_id,
            parent_session_id=parent_session_id, cwd=cwd, profile_name=profile_name,
            git_repo_root=git_repo_root, origin_json=origin_json, display_name=display_name,
        )
        command = self._upsert_command(session_id, source, fields, columns)
        return await self._write(command, patience=TRANSCRIPT_PATIENCE)

    async def ensure_session(
        self,
        session_id: str,
        source: str = "unknown",
        model: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Like :meth:`create_session` with ``source`` defaulting to ``"unknown"``; returns ``session_id``."""
        return await self.create_session(session_id, source, model=model, **kwargs)

    async def reopen_session(self, session_id: str) -> None:
        """Clear ``ended_at`` and ``end_reason``; unknown sessions are a no-op. Returns None."""
        await self._write(ReopenSession(session_id=require_id(session_id)))

    async def end_session(self, session_id: str, end_reason: str) -> None:
        """End the session unless it already ended (the first reason wins). Returns None."""
        if not isinstance(end_reason, str):
            raise TypeError(f"end_reason must be a str, not {type(end_reason).__name__}")
        await self._write(EndSession(session_id=require_id(session_id), end_reason=end_reason, ended_at=time.time()))

    async def delete_session(
        self,
        session_id: str,
        sessions_dir: os.PathLike[str] | str | None = None,
        expected_delete_ids: list[str] | None = None,
    ) -> bool:
        """Delete the session, its delegate sub-sessions and their messages.

        Other children are detached and survive. With ``expected_delete_ids``
        nothing is deleted unless the target set still matches it. Returns
        True when something was deleted, False for an unknown id or a mismatch.
        """
        expected = None
        if expected_delete_ids is not None:
            expected = tuple(require_id(i, "expected_delete_ids item") for i in expected_delete_ids)
        removed = await self._write(DeleteSession(session_id=require_id(session_id), expected_delete_ids=expected))
        if removed and sessions_dir is not None:
            await self._remove_session_files(Path(sessions_dir), removed)
        return bool(removed)

    async def update_session_meta(self, session_id: str, model_config_json: str | None, model: str | None = None) -> None:
        """Overwrite ``model_config`` with the given JSON text; keep the model when ``model`` is None. Returns None.

        The text is stored as given (like the reference, even if it is not
        JSON); JSON that breaks the limits of :mod:`hermes_state.limits` raises.
        """
        if isinstance(model_config_json, str):
            parsed = parse_json_text(model_config_json, "model_config_json")
            if parsed is not NOT_JSON:
                check_json_value(parsed, "model_config_json")
        await self._write(
            UpdateSessionMeta(
                session_id=require_id(session_id),
                model_config_json=opt_text(model_config_json, "model_config_json"),
                model=opt_text(model, "model"),
            )
        )

    async def update_session_model(self, session_id: str, model: str) -> None:
        """Switch the session's model, dropping its browser model lock and system prompt. Returns None."""
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, not {type(model).__name__}")
        await self._write(UpdateSessionModel(session_id=require_id(session_id), model=model))

    async def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Store (de-duplicated) and reference the prompt; None clears it. Returns None."""

        prompt = opt_text(system_prompt, "system_prompt")
        await self._write(
            UpdateSystemPrompt(
                session_id=require_id(session_id),
                system_prompt=prompt,
                system_prompt_hash=hashed_prompt(prompt),
            )
        )

    # ------------------------------------------------------------------ messages

    async def append_message(
        self,
        session_id: str,
        role: str,
        content: Any = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_content: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        effect_disposition: str | None = None,
        timestamp: Any = None,
        api_content: str | None = None,
        display_kind: str | None = None,
        display_metadata: dict[str, Any] | None = None,
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Append one message; returns its row id once committed.

        Raises :class:`~hermes_state.SessionNotFoundError` for an unknown
        session and :class:`~hermes_state.CompressionSessionClosedError` when
        the session was closed by compression. With ``turn_lease_holder`` the
        write is fenced: it raises :class:`~hermes_state.SessionTurnLeaseLostError`
        (and stores nothing) unless that holder owns the conversation's turn
        lease when the write's transaction runs; a lease of that holder that
        expired without a takeover is renewed to now + ``turn_lease_ttl_seconds``.
        A compression lease never holds an append back (``compression_lock_holder``
        is accepted and unused): the compaction's watermark keeps it.
        """
        if (
            role.__class__ is str and content.__class__ is str and tool_name is None and tool_calls is None
            and tool_call_id is None and token_count is None and finish_reason is None and reasoning is None
            and reasoning_content is None and reasoning_details is None and codex_reasoning_items is None
            and codex_message_items is None and platform_message_id is None and effect_disposition is None
            and timestamp is None and api_content is None and display_kind is None and display_metadata is None
        ):
            row = encode_text_turn(role, content, observed)  # the plain turn: same row, fewer steps
        else:
            row = encode_message_args(
                role=role, content=content, tool_name=tool_name, tool_calls=tool_calls,
                tool_call_id=tool_call_id, token_count=token_count, finish_reason=finish_reason,
                reasoning=reasoning, reasoning_content=reasoning_content, reasoning_details=reasoning_details,
                codex_reasoning_items=codex_reasoning_items, codex_message_items=codex_message_items,
                platform_message_id=platform_message_id, observed=observed,
                effect_disposition=effect_disposition, timestamp=timestamp, api_content=api_content,
                display_kind=display_kind, display_metadata=display_metadata,
            )
        opt_text(compression_lock_holder, "compression_lock_holder")
        command = AppendMessages(
            session_id=require_id(session_id),
            rows=(row,),
            want_id=True,
            fence=transcript_fence(turn_lease_holder, turn_lease_ttl_seconds),
        )
        return await self._write(command, patience=TRANSCRIPT_PATIENCE, size=rows_size(command.rows))

    async def append_messages_batch(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        """Append message dicts in order, all-or-nothing per transaction; returns the rows written.

        With ``chunk_rows`` the list is written in consecutive transactions of
        at most that many rows (earlier chunks stay committed if a later one
        fails), except when the write is fenced (``turn_lease_holder``, or a
        :meth:`session_turn`): then the whole call is one transaction, so a
        lost lease commits nothing of it. The parameter order is upstream's
        since 2026-08: ``turn_lease_holder`` comes before ``chunk_rows``.
        """
        session_id = require_id(session_id)
        opt_text(compression_lock_holder, "compression_lock_holder")
        fence = transcript_fence(turn_lease_holder, turn_lease_ttl_seconds)
        if chunk_rows is not None:
            if int64_arg(chunk_rows, "chunk_rows") <= 0:
                raise ValueError("chunk_rows must be positive")
        rows = encode_message_dicts(messages)
        if not rows:
            return 0
        step = chunk_rows if chunk_rows is not None and fence is None else len(rows)
        total = 0
        for start in range(0, len(rows), step):
            chunk = rows[start : start + step]
            command = AppendMessages(session_id=session_id, rows=chunk, fence=fence)
            total += await self._write(command, patience=TRANSCRIPT_PATIENCE, size=rows_size(chunk))
        return total

    async def replace_messages(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        *,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> None:
        """Replace the session's transcript and reset its counters to the new rows. Returns None.

        ``archive_dropped`` keeps the old rows on disk as inactive;
        ``active_only`` deletes only the active rows; otherwise all rows go.
        ``turn_lease_holder`` fences the write as for :meth:`append_message`.
        """
        rows = encode_message_dicts(messages)
        command = ReplaceMessages(
            session_id=require_id(session_id), rows=rows, active_only=bool(active_only),
            archive_dropped=bool(archive_dropped), fence=transcript_fence(turn_lease_holder, turn_lease_ttl_seconds),
        )
        await self._write(command, size=rows_size(rows))

    async def pop_message(
        self, session_id: str, *, turn_lease_holder: str | None = None, turn_lease_ttl_seconds: float = 300.0
    ) -> dict[str, Any] | None:
        """Delete the session's newest active message; returns it decoded (as ``get_messages`` would), or None.

        The row is chosen and deleted by one queued command, so concurrent
        pops remove distinct rows and never the same one twice. Counters drop
        by the row and its tool calls. An unknown or empty session returns
        None; the append guards apply (a session closed by compression raises
        :class:`~hermes_state.CompressionSessionClosedError`; a fenced pop
        whose lease is lost raises :class:`~hermes_state.SessionTurnLeaseLostError`).
        """
        command = PopMessage(
            session_id=require_id(session_id), fence=transcript_fence(turn_lease_holder, turn_lease_ttl_seconds)
        )
        return await self._write(command, patience=TRANSCRIPT_PATIENCE)

    # ---------------------------------------------------------------------- usage

    async def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
    ) -> None:
        """Add (or with ``absolute=True`` set) the session's token and cost totals. Returns None.

        Creates the session with source ``"unknown"`` when it does not exist.
        Incremental deltas also feed the per-model usage ledger.
        """
        command = UpdateTokenCounts(
            session_id=require_id(session_id),
            now=time.time(),
            input_tokens=count_arg(input_tokens, "input_tokens"),
            output_tokens=count_arg(output_tokens, "output_tokens"),
            model=opt_text(model, "model"),
            cache_read_tokens=count_arg(cache_read_tokens, "cache_read_tokens"),
            cache_write_tokens=count_arg(cache_write_tokens, "cache_write_tokens"),
            reasoning_tokens=count_arg(reasoning_tokens, "reasoning_tokens"),
            estimated_cost_usd=opt_number(estimated_cost_usd, "estimated_cost_usd"),
            actual_cost_usd=opt_number(actual_cost_usd, "actual_cost_usd"),
            cost_status=opt_text(cost_status, "cost_status"),
            cost_source=opt_text(cost_source, "cost_source"),
            pricing_version=opt_text(pricing_version, "pricing_version"),
            billing_provider=opt_text(billing_provider, "billing_provider"),
            billing_base_url=opt_text(billing_base_url, "billing_base_url"),
            billing_mode=opt_text(billing_mode, "billing_mode"),
            api_call_count=count_arg(api_call_count, "api_call_count"),
            absolute=bool(absolute),
        )
        await self._write(command, patience=TRANSCRIPT_PATIENCE)

    async def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_call_count: int = 1,
    ) -> None:
        """Add an auxiliary task's usage (e.g. title generation) to the usage ledger. Returns None.

        ``api_call_count`` is how many API calls the usage covers (checked
        like the token counters). Session totals are not touched. Empty
        ``session_id`` or ``task`` is a no-op.
        """
        if not session_id or not task:
            return
        command = RecordAuxiliaryUsage(
            session_id=require_id(session_id),
            task=require_id(task, "task"),
            now=time.time(),
            model=opt_text(model, "model"),
            billing_provider=opt_text(billing_provider, "billing_provider"),
            billing_base_url=opt_text(billing_base_url, "billing_base_url"),
            input_tokens=count_arg(input_tokens, "input_tokens"),
            output_tokens=count_arg(output_tokens, "output_tokens"),
            cache_read_tokens=count_arg(cache_read_tokens, "cache_read_tokens"),
            cache_write_tokens=count_arg(cache_write_tokens, "cache_write_tokens"),
            reasoning_tokens=count_arg(reasoning_tokens, "reasoning_tokens"),
            estimated_cost_usd=opt_number(estimated_cost_usd, "estimated_cost_usd"),
            api_call_count=count_arg(api_call_count, "api_call_count"),
        )
        await self._write(command, patience=TRANSCRIPT_PATIENCE)

    # ----------------------------------------------------------------------- meta

    async def get_meta(self, key: str) -> str | None:
        """Return the ``state_meta`` value for ``key``, or None."""
        return await self._query("get_meta", require_id(key, "key"))

    async def set_meta(self, key: str, value: str | None, *, cursor: Any = None) -> None:
        """Upsert a ``state_meta`` key (``cursor`` is accepted for compatibility and ignored). Returns None."""
        await self._write(SetMeta(key=require_id(key, "key"), value=None if value is None else str(value)))

    # ---------------------------------------------------------------------- reads

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        """Return the session row as a dict (``system_prompt`` resolved), or None if unknown."""
        return await self._query("get_session", require_id(session_id))

    async def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
        *,
        before_id: int | None = None,
    ) -> list[dict[str, Any]]:
        """Return the session's message rows in id order (decoded), optionally paged.

        ``latest=True`` takes the page from the newest end but still returns
        it oldest first. ``after_id`` cannot be combined with ``latest`` or ``offset``.
        ``before_id`` keeps the rows with a smaller id; with ``latest=True`` and
        a ``limit`` it reads the page just before a row (keyset paging backwards).
        """
        if after_id is not None and (latest or offset):
            raise ValueError("after_id is incompatible with latest/offset paging")
        if limit is not None:
            limit = count_arg(limit, "limit")
            if limit < 0:
                raise ValueError("limit must be non-negative")
        offset = count_arg(offset, "offset")
        if offset < 0:
            raise ValueError("offset must be non-negative")
        if after_id is not None:
            after_id = count_arg(after_id, "after_id")
        if before_id is not None:
            before_id = count_arg(before_id, "before_id")
        return await self._query(
            "get_messages", require_id(session_id), bool(include_inactive), limit, offset, bool(latest), after_id, before_id
        )

    async def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
        include_row_ids: bool = False,
    ) -> list[dict[str, Any]]:
        """Return the transcript as OpenAI-style message dicts (``[]`` for an unknown session).

        ``include_ancestors`` puts the ancestors' rows first, walking parent
        links up to a /branch session (truthy ``model_config._branched_from``),
        which owns its transcript: a branch loads only its own rows.
        """
        rows = await self._query(
            "conversation_rows", require_id(session_id), bool(include_ancestors), bool(include_inactive)
        )
        return conversation.build_conversation(
            rows,
            include_ancestors=bool(include_ancestors),
            include_row_ids=bool(include_row_ids),
            repair_alternation=bool(repair_alternation),
        )

    async def message_count(self, session_id: str | None = None) -> int:
        """Return how many rows the session has (inactive ones included), or the whole table's count."""
        return await self._query("message_count", session_id or None)

    async def _get_message_storage_state(self, message_id: int) -> dict[str, Any] | None:
        """Return ``{"session_id", "active", "compacted"}`` (flags as 0/1) of message ``message_id``, or None.

        None also for a falsy id. Upstream's session-search tool reads it
        (through ``getattr``) to tell compaction-archived rows (``active=0,
        compacted=1``) from live and rewound ones.
        """
        if not message_id:
            return None
        return await self._query("message_storage_state", int64_arg(message_id, "message_id"))


class SessionDB(
    TurnLeaseMethods,
    SearchMethods,
    CompressionMethods,
    TitleMethods,
    ListingMethods,
    UsageMethods,
    MaintenanceMethods,
    RowMethods,
    HealthMethods,
    CoreMethods,
):
    """An async session store shared by every agent of one worker.

    ``SessionDB(db_path=None, read_only=False)`` records the path only;
    ``db_path`` defaults to ``$HERMES_HOME/state.db``. Await ``close()`` once
    at shutdown: it applies every queued write, then closes the connections.
    """
