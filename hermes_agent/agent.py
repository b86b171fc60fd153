"""``AIAgent``: the smallest agent loop that honours the hermes-state storage contract.

What is durable when (a host can rely on each point surviving a crash):

1. the session row, before the first provider request (a fill-only upsert,
   so a host may pre-create and enrich it);
2. the user row, before the first provider request;
3. an assistant row that asks for tools, before any of those tools runs (if
   that write fails the turn stops: no side effect runs on undurable state);
4. each tool segment's results, right after the segment ran;
5. the final answer, at once; the finalizer then closes any open tail.

A turn on a session that already has a row holds the conversation's turn
lease (``SessionDB.session_turn``) for its whole run, so workers sharing a
store never run two turns of one conversation at once: it waits for the
lease, reloads the transcript from the store when it had to wait (another
turn may have appended), writes every row fenced by the lease's token, and
stops with ``turn_exit_reason == "turn_lease_lost"`` (and writes nothing
more) if the lease is lost while it runs.

Every row is written once: a dict is marked when its append committed, and
dicts passed in as ``conversation_history`` count as already durable. Token
usage is recorded per provider call as an increment. Cancelling the task
that runs a turn still finalizes it (shielded, through repeated
cancellation) and then re-raises the ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from .providers import Provider, ProviderError, ProviderReply, ProviderRequest, Usage
from .session_search import (
    SESSION_SEARCH_GUIDANCE,
    SESSION_SEARCH_TOOL,
    active_profile_name,
)
from .shielding import finish_owned
from .tools import Tool, ToolContext, render_result
from .trajectory import append_record, trajectory_record
from .transcript import (
    EPHEMERAL,
    PERSISTED,
    append_kwargs,
    cancelled_tool_message,
    close_incomplete_tail,
    estimate_tokens,
    missing_tool_results,
    tool_message,
    wire_messages,
)

__all__ = ["DEFAULT_SYSTEM_PROMPT", "DEFAULT_TOOLS", "AIAgent", "load_resume_history", "new_session_id"]

log = logging.getLogger("hermes_agent")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the tools you are given when they help."
COMPACTION_PREFIX = "[CONTEXT COMPACTION] Summary of the earlier conversation:\n"
_SUMMARY_SYSTEM = (
    "You compress conversations. Write a faithful, compact summary of the conversation you are given: "
    "the user's goals, decisions, facts learned, tool results that matter and open questions."
)
_SUMMARY_INSTRUCTION = "Summarize the conversation above for your own later use. Reply with the summary only."
_REQUIRED_STORE_METHODS = ("create_session", "append_message", "get_session", "end_session", "close")
_ITERATION_LIMIT_TEXT = "I stopped because this turn reached its iteration limit before finishing."


class _DefaultTools:
    def __repr__(self) -> str:
        return "DEFAULT_TOOLS"


DEFAULT_TOOLS: Any = _DefaultTools()


def new_session_id(now: datetime | None = None) -> str:
    """Return a fresh session id, ``YYYYMMDD_HHMMSS_<6 hex>``."""
    return f"{(now or datetime.now()).strftime('%Y%m%d_%H%M%S')}_{secrets.token_hex(3)}"


async def load_resume_history(session_db: Any, session_id: str) -> tuple[str, list[dict[str, Any]]]:
    """Return ``(tip_id, model_history)`` to continue ``session_id`` with a new agent.

    Follows compression children to the live tip (``resolve_resume_session_id``)
    and loads its active rows repaired for role alternation
    (``get_resume_conversations``). Pass ``tip_id`` as the new agent's
    ``session_id`` and ``model_history`` as ``conversation_history``.
    """
    tip = await session_db.resolve_resume_session_id(session_id)
    model_history, _display = await session_db.get_resume_conversations(tip)
    return tip, model_history


def _validate_store(store: Any) -> None:
    bad = [name for name in _REQUIRED_STORE_METHODS if not inspect.iscoroutinefunction(getattr(store, name, None))]
    if bad:
        raise TypeError(
            "session_db must provide native async SessionDB methods (coroutine functions); "
            f"missing or not async: {', '.join(bad)}"
        )


class _Turn:
    """The state of one ``run_conversation`` call."""

    def __init__(self, messages: list[dict[str, Any]], durable: set[int]) -> None:
        self.messages = messages
        self.durable = durable  # id()s of history dicts: durable already, never written
        self.final_response: str | None = None
        self.interrupted = False
        self.failed = False
        self.exit_reason = "running"
        self.error: str | None = None
        self.api_calls = 0
        self.compression_attempts = 0
        self.compressions = 0
        self.writes_allowed = True  # False once the turn lease is missing or lost: nothing more is written
        self.usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                      "cache_write_tokens": 0, "reasoning_tokens": 0, "estimated_cost_usd": 0.0}


class AIAgent:
    """A conversation agent persisting into a (usually shared) hermes-state store.

    ``provider`` answers model requests (see :mod:`hermes_agent.providers`).
    ``session_db`` is borrowed: :meth:`close` ends the session but never
    closes the store. Without one nothing is persisted, unless the
    ``session_search`` tool opens ``$HERMES_HOME/state.db``; the agent then
    owns that store, persists into it and closes it in :meth:`close`.

    Turns of one agent run one at a time; distinct agents run in parallel on
    one store. The agent keeps no history between turns: pass
    ``conversation_history`` (e.g. the previous ``result["messages"]``).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        session_db: Any = None,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        model: str = "",
        platform: str | None = None,
        system_prompt: str | None = None,
        tools: Iterable[Tool] | None = DEFAULT_TOOLS,
        save_trajectories: bool = False,
        trajectory_dir: os.PathLike[str] | str | None = None,
        max_iterations: int = 90,
        max_tokens: int | None = None,
        reasoning_config: dict[str, Any] | None = None,
        compression_threshold_tokens: int | None = None,
        compression_in_place: bool = True,
        compression_lock_ttl: float = 300.0,
        max_compression_attempts: int = 3,
        end_session_on_close: bool = True,
        persist_disabled: bool = False,
        close_provider: bool = False,
        max_tool_result_chars: int = 100_000,
        turn_lease_ttl: float = 300.0,
        turn_lease_wait: float = 1800.0,
        turn_lease_refresh: float = 60.0,
        on_turn_lease_wait: Callable[[float], Any] | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(getattr(provider, "complete", None)):
            raise TypeError("provider must have an async complete(request) method")
        if session_db is not None:
            _validate_store(session_db)
        for name, value in (("session_id", session_id), ("parent_session_id", parent_session_id)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None")
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, not {type(model).__name__}")
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError("max_iterations must be a positive int")

        self.provider = provider
        self.model = model
        self.platform = platform
        self.session_id: str = session_id or new_session_id()
        self.parent_session_id = parent_session_id
        self.max_iterations = max_iterations
        self.max_tokens = max_tokens
        self.save_trajectories = bool(save_trajectories)
        self.trajectory_dir = Path(trajectory_dir) if trajectory_dir is not None else Path.cwd()
        self.compression_threshold_tokens = compression_threshold_tokens
        self.compression_in_place = bool(compression_in_place)
        self.compression_lock_ttl = float(compression_lock_ttl)
        self.max_compression_attempts = max_compression_attempts
        self.max_tool_result_chars = max_tool_result_chars
        self.turn_lease_ttl = float(turn_lease_ttl)
        self.turn_lease_wait = float(turn_lease_wait)
        self.turn_lease_refresh = float(turn_lease_refresh)
        self._on_turn_lease_wait = on_turn_lease_wait
        self._turn_lease: Any = None  # the SessionTurn of the running turn, if any

        self._session_db = session_db
        self._owns_session_db = False
        self._session_created = False
        self._end_session_on_close = bool(end_session_on_close)
        self._persist_disabled = bool(persist_disabled)
        self._close_provider = bool(close_provider)
        self._system_prompt = system_prompt
        self._cached_system_prompt: str | None = None
        self._model_config = {"max_iterations": max_iterations, "reasoning_config": reasoning_config,
                              "max_tokens": max_tokens}
        self._source = os.environ.get("HERMES_SESSION_SOURCE") or platform or "cli"
        local_terminal = os.environ.get("TERMINAL_ENV", "local") in ("", "local")
        self._cwd = os.getcwd() if self._source == "cli" and local_terminal else None
        profile = active_profile_name()
        self._profile_name = None if profile == "default" else profile

        chosen = [SESSION_SEARCH_TOOL] if tools is DEFAULT_TOOLS else list(tools or [])
        self._tools: dict[str, Tool] = {}
        for item in chosen:
            if not isinstance(item, Tool):
                raise TypeError(f"tools must be Tool instances, not {type(item).__name__}")
            if item.name in self._tools:
                raise ValueError(f"duplicate tool name: {item.name}")
            if item.is_available():
                self._tools[item.name] = item

        self._turn_lock = asyncio.Lock()
        self._persist_lock = asyncio.Lock()
        self._active_turn_task: asyncio.Task[Any] | None = None
        self._interrupt_requested = False
        self._compression_holder: str | None = None
        self._pending_usage: list[Usage] = []
        self._closing = False
        self._closed = False
        self._close_task: asyncio.Future[None] | None = None
        self.session_totals = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                               "cache_write_tokens": 0, "reasoning_tokens": 0, "estimated_cost_usd": 0.0,
                               "api_calls": 0}

    # ---------------------------------------------------------------- properties

    @property
    def session_db(self) -> Any:
        """The store the agent persists into, or None."""
        return self._session_db

    @property
    def owns_session_db(self) -> bool:
        """True when the agent opened its store itself (and will close it)."""
        return self._owns_session_db

    @property
    def closed(self) -> bool:
        """True once :meth:`close` finished."""
        return self._closed

    @property
    def tools(self) -> list[Tool]:
        """The tools offered to the model."""
        return list(self._tools.values())

    @property
    def system_prompt(self) -> str | None:
        """The system prompt in use (set at the first turn), or None before it."""
        return self._cached_system_prompt

    def __repr__(self) -> str:
        return f"<AIAgent session={self.session_id!r} model={self.model!r}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> AIAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- public API

    async def chat(self, message: str) -> str:
        """Run one turn without history and return the final text ("" when there is none)."""
        result = await self.run_conversation(message)
        return result.get("final_response") or ""

    def interrupt(self) -> None:
        """Ask the running turn to stop at its next safe point; it returns with ``interrupted=True``."""
        self._interrupt_requested = True

    async def run_conversation(
        self,
        user_message: str,
        system_message: str | None = None,
        conversation_history: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run one turn and return its result dict.

        Keys: ``final_response``, ``messages`` (history plus this turn),
        ``api_calls``, ``completed``, ``failed``, ``interrupted``,
        ``turn_exit_reason``, ``session_id``, ``usage`` (this turn) and the
        session's running totals (``input_tokens``, ``output_tokens``, ...);
        ``error`` and ``cleanup_errors`` when something went wrong.
        ``system_message`` is appended to the system prompt when the agent
        builds it (first turn of a fresh session).
        """
        if not isinstance(user_message, str):
            raise TypeError(f"user_message must be a str, not {type(user_message).__name__}")
        history = list(conversation_history or [])
        if any(not isinstance(m, dict) for m in history):
            raise TypeError("conversation_history must be a list of message dicts")
        if self._closing:
            raise RuntimeError("AIAgent is closed")
        async with self._turn_lock:
            if self._closing:
                raise RuntimeError("AIAgent is closed")
            self._active_turn_task = asyncio.current_task()
            try:
                return await self._run_turn(user_message, system_message, history)
            finally:
                self._active_turn_task = None

    async def close(self) -> None:
        """Cancel and await an active turn, end the session (``agent_close``), close an owned store.

        A borrowed store stays open. Idempotent; concurrent calls share one
        close, which finishes even if the caller is cancelled (the
        cancellation is re-raised afterwards).
        """
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.ensure_future(self._close_now())
        await finish_owned(self._close_task)

    # ------------------------------------------------------------------- the turn

    async def _run_turn(self, user_message: str, system_message: str | None, history: list[dict[str, Any]]) -> dict[str, Any]:
        self._interrupt_requested = False
        self._pending_usage = []
        # The user dict exists before the first await, so any cancellation can persist it.
        turn = _Turn(history + [{"role": "user", "content": user_message}], {id(m) for m in history})
        cancelled = False
        lease: Any = None
        try:
            lease = await self._enter_turn_lease(turn)
            if turn.writes_allowed:
                await self._prologue(turn, system_message, bool(history))
                await self._loop_while_leased(turn, lease)
        except asyncio.CancelledError:
            cancelled = True
            turn.interrupted = True
            turn.exit_reason = "cancelled"
        except Exception as exc:
            log.warning("turn of session %s failed: %s", self.session_id, exc, exc_info=True)
            turn.failed = True
            turn.exit_reason = "provider_error" if isinstance(exc, ProviderError) else "error"
            turn.error = f"{type(exc).__name__}: {exc}"
        try:
            result = await finish_owned(self._finalize_turn(turn))
        finally:
            self._turn_lease = None
            if lease is not None:
                await finish_owned(lease.__aexit__(None, None, None))
        if cancelled:
            raise asyncio.CancelledError()
        return result

    async def _enter_turn_lease(self, turn: _Turn) -> Any:
        """Hold the conversation's turn lease for this turn (upstream's client protocol); returns it, or None.

        No lease without a store, without persistence, or for a session that
        has no row yet (nobody else can run it). A lease that stays held past
        ``turn_lease_wait`` fails the turn (``session_turn_lease_timeout:<id>``),
        an interrupt while waiting ends it as interrupted; neither writes
        anything. After a wait the transcript is reloaded from the latest tip.
        """
        db = None if self._persist_disabled else self._session_db
        if db is None or not callable(getattr(db, "session_turn", None)):
            return None
        from hermes_state import SessionTurnAbortedError, SessionTurnTimeoutError

        if not self._session_created and await db.get_session(self.session_id) is None:
            return None
        holder = f"pid={os.getpid()}:turn={uuid.uuid4().hex}:platform={self.platform or self._source}"
        lease = db.session_turn(
            self.session_id, holder, ttl_seconds=self.turn_lease_ttl, wait_seconds=self.turn_lease_wait,
            refresh_interval_seconds=self.turn_lease_refresh, on_wait=self._on_turn_lease_wait,
            should_abort=lambda: self._interrupt_requested,
        )
        try:
            await lease.__aenter__()
        except SessionTurnAbortedError:
            turn.interrupted, turn.exit_reason, turn.writes_allowed = True, "interrupted", False
            return None
        except SessionTurnTimeoutError:
            turn.failed, turn.exit_reason, turn.writes_allowed = True, "session_turn_lease_timeout", False
            turn.error = f"session_turn_lease_timeout:{self.session_id}"
            turn.final_response = ""
            return None
        self._turn_lease = lease
        if lease.waited > 0:
            # Another turn ran meanwhile: continue from what it left, not from the caller's copy.
            tip = await db.resolve_resume_session_id(self.session_id)
            history = await db.get_messages_as_conversation(tip)
            self.session_id = tip
            turn.messages[:] = history + turn.messages[-1:]
            turn.durable = {id(m) for m in history}
        return lease

    async def _loop_while_leased(self, turn: _Turn, lease: Any) -> None:
        """Run the turn's loop; a lost lease stops it at once (nothing more is written)."""
        if lease is None:
            await self._loop(turn)
            return
        loop_task = asyncio.ensure_future(self._loop(turn))
        lost = asyncio.ensure_future(lease.wait_lost())
        try:
            await asyncio.wait({loop_task, lost}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            loop_task.cancel()
            await asyncio.wait({loop_task})
            raise
        finally:
            lost.cancel()
        if loop_task.done():
            loop_task.result()
            return
        loop_task.cancel()
        await asyncio.wait({loop_task})
        self._stop_for_lost_lease(turn)

    def _stop_for_lost_lease(self, turn: _Turn) -> None:
        turn.interrupted, turn.writes_allowed = True, False
        turn.exit_reason = "turn_lease_lost"
        turn.final_response = turn.final_response or ""
        turn.error = (
            f"the turn lease of session {self.session_id} was lost (taken over by another worker); "
            "this turn stopped and wrote nothing more"
        )

    async def _prologue(self, turn: _Turn, system_message: str | None, has_history: bool) -> None:
        await self._adopt_rotated_child(turn)
        if self._cached_system_prompt is None:
            await self._restore_or_build_system_prompt(system_message, has_history or len(turn.messages) > 1)
        await self._ensure_db_session()
        await self._flush(turn)  # crash-safe user row; a failure here is logged, and stops the turn before tools

    async def _loop(self, turn: _Turn) -> None:
        schemas = [t.schema() for t in self._tools.values()]
        for _ in range(self.max_iterations):
            if self._interrupt_requested:
                turn.interrupted, turn.exit_reason = True, "interrupted"
                return
            await self._maybe_compress(turn)
            request = ProviderRequest(
                messages=wire_messages(self._cached_system_prompt, turn.messages),
                tools=schemas,
                model=self.model,
                max_tokens=self.max_tokens,
            )
            reply = await self.provider.complete(request)
            turn.api_calls += 1
            if reply.usage is not None:
                await self._record_usage(turn, reply.usage)
            message = _assistant_dict(reply)
            turn.messages.append(message)
            if message.get("tool_calls"):
                if await self._flush(turn) is False:
                    self._stop_for_persistence(turn)
                    return
                if not await self._run_tools(turn, message):
                    return
                continue
            turn.final_response = message.get("content") or ""
            turn.exit_reason = "completed"
            await self._flush(turn)  # at once; a failure is retried by the finalizer
            return
        turn.exit_reason = "max_iterations"
        turn.final_response = _ITERATION_LIMIT_TEXT
        turn.messages.append({"role": "assistant", "content": _ITERATION_LIMIT_TEXT})

    def _stop_for_persistence(self, turn: _Turn) -> None:
        if turn.exit_reason == "turn_lease_lost":
            return
        turn.failed = True
        turn.final_response = ""
        turn.exit_reason = "session_persistence_failed"
        turn.error = turn.error or "the transcript could not be persisted; tools were not run"

    async def _finalize_turn(self, turn: _Turn) -> dict[str, Any]:
        cleanup_errors: list[str] = []
        completed = turn.exit_reason == "completed" and not (turn.failed or turn.interrupted)
        if self.save_trajectories:
            # Written before the tail repair: synthetic closing rows are not part of the sample.
            try:
                record = trajectory_record(turn.messages, [t.schema() for t in self._tools.values()],
                                           model=self.model, completed=completed, session_id=self.session_id)
                await append_record(self.trajectory_dir, record)
            except Exception as exc:
                log.warning("trajectory not written: %s", exc)
                cleanup_errors.append(f"trajectory: {exc}")
        close_incomplete_tail(turn.messages, turn.final_response, interrupted=turn.interrupted)
        if await self._flush(turn) is False:
            cleanup_errors.append("transcript: some rows could not be persisted")
        await self._flush_token_counts()
        result: dict[str, Any] = {
            "final_response": turn.final_response,
            "messages": turn.messages,
            "api_calls": turn.api_calls,
            "completed": completed,
            "failed": turn.failed,
            "interrupted": turn.interrupted,
            "turn_exit_reason": turn.exit_reason,
            "session_id": self.session_id,
            "compressions": turn.compressions,
            "usage": dict(turn.usage, api_calls=turn.api_calls),
            **self.session_totals,
        }
        if turn.error:
            result["error"] = turn.error
        if cleanup_errors:
            result["cleanup_errors"] = cleanup_errors
        return result

    # ------------------------------------------------------------------ prologue

    async def _adopt_rotated_child(self, turn: _Turn) -> None:
        """If another agent rotated this session by compression, continue in its live child."""
        db = self._session_db
        find_child = getattr(db, "find_live_compression_child", None)
        if db is None or self._persist_disabled or not callable(find_child):
            return
        try:
            row = await db.get_session(self.session_id)
            if not row or row.get("end_reason") != "compression":
                return
            child = await find_child(self.session_id)
            if not child:
                return
            history = await db.get_messages_as_conversation(child["id"])
        except Exception as exc:
            log.warning("could not adopt the compression child of %s: %s", self.session_id, exc)
            return
        log.info("session %s was rotated by compression; continuing in %s", self.session_id, child["id"])
        self.session_id = child["id"]
        self._session_created = True
        self._cached_system_prompt = child.get("system_prompt") or self._cached_system_prompt
        turn.messages[:] = history + turn.messages[-1:]
        turn.durable = {id(m) for m in history}

    async def _restore_or_build_system_prompt(self, system_message: str | None, continuing: bool) -> None:
        db = None if self._persist_disabled else self._session_db
        row = None
        if continuing and db is not None:
            try:
                row = await db.get_session(self.session_id)
            except Exception as exc:
                log.warning("could not read session %s: %s", self.session_id, exc)
            if row and row.get("system_prompt"):
                self._cached_system_prompt = row["system_prompt"]  # reused byte for byte
                return
        parts = [self._system_prompt or DEFAULT_SYSTEM_PROMPT]
        if SESSION_SEARCH_TOOL.name in self._tools:
            parts.append(SESSION_SEARCH_GUIDANCE)
        if system_message:
            parts.append(system_message)
        self._cached_system_prompt = "\n\n".join(parts)
        if row is not None and db is not None:
            try:
                await db.update_system_prompt(self.session_id, self._cached_system_prompt)
            except Exception as exc:
                log.warning("could not store the system prompt of %s: %s", self.session_id, exc)

    # --------------------------------------------------------------- persistence

    async def _ensure_db_session(self) -> bool:
        if self._session_db is None or self._persist_disabled:
            return False
        async with self._persist_lock:
            return await self._ensure_db_session_unlocked()

    async def _ensure_db_session_unlocked(self) -> bool:
        if self._session_created:
            return True
        db = self._session_db
        try:
            await db.create_session(
                self.session_id,
                self._source,
                model=self.model or None,
                model_config=self._model_config,
                system_prompt=self._cached_system_prompt,
                user_id=None,
                parent_session_id=self.parent_session_id,
                cwd=self._cwd,
                profile_name=self._profile_name,
            )
        except Exception as exc:
            log.warning("could not create session %s (retried at the next write): %s", self.session_id, exc)
            return False
        self._session_created = True
        pending, self._pending_usage = self._pending_usage, []
        for usage in pending:  # calls made before a store existed (lazy recall store)
            await self._write_usage(usage)
        return True

    async def _flush(self, turn: _Turn) -> bool | None:
        """Append every dict not yet durable, in order; True on success, False on a failed write, None without a store.

        The writes run in their own task: a cancelled caller never leaves a
        committed row unmarked (which would write it twice), and the next
        flush waits for this one on the persist lock.
        """
        if self._session_db is None or self._persist_disabled:
            return None
        if not turn.writes_allowed:
            return False
        return await asyncio.shield(asyncio.ensure_future(self._flush_now(turn)))

    async def _flush_now(self, turn: _Turn) -> bool | None:
        async with self._persist_lock:
            db = self._session_db
            if db is None:
                return None
            if not await self._ensure_db_session_unlocked():
                return False
            extra = {"compression_lock_holder": self._compression_holder} if self._compression_holder else {}
            writer = self._turn_lease or db  # through the lease: every row fenced by its token
            for message in list(turn.messages):
                if message.get(PERSISTED) or message.get(EPHEMERAL) or id(message) in turn.durable:
                    continue
                try:
                    await writer.append_message(self.session_id, **append_kwargs(message), **extra)
                except Exception as exc:
                    if type(exc).__name__ == "SessionTurnLeaseLostError":
                        self._stop_for_lost_lease(turn)
                        return False
                    log.warning("could not persist a %s row of session %s: %s",
                                message.get("role"), self.session_id, exc)
                    turn.error = turn.error or f"persistence failed: {type(exc).__name__}: {exc}"
                    return False
                message[PERSISTED] = True
            return True

    async def _record_usage(self, turn: _Turn, usage: Usage) -> None:
        for key, value in usage.as_dict().items():
            if value:
                turn.usage[key] += value
                self.session_totals[key] += value
        self.session_totals["api_calls"] += 1
        if self._persist_disabled:
            return
        if self._session_db is None or not await self._ensure_db_session():
            self._pending_usage.append(usage)
            return
        await self._write_usage(usage)

    async def _write_usage(self, usage: Usage) -> None:
        db = self._session_db
        kwargs = dict(
            usage.as_dict(),
            model=self.model or None,
            billing_provider=getattr(self.provider, "name", None),
            billing_base_url=getattr(self.provider, "base_url", None),
            api_call_count=1,
        )
        queue = getattr(db, "queue_token_counts", None)
        try:
            if inspect.iscoroutinefunction(queue):
                await queue(self.session_id, **kwargs)
            else:
                await db.update_token_counts(self.session_id, **kwargs)
        except Exception as exc:
            log.debug("token usage of %s not recorded: %s", self.session_id, exc)

    async def _flush_token_counts(self) -> None:
        flush = getattr(self._session_db, "flush_token_counts", None)
        if self._session_db is not None and inspect.iscoroutinefunction(flush):
            try:
                await flush()
            except Exception as exc:
                log.debug("flush_token_counts failed: %s", exc)

    # ---------------------------------------------------------------------- tools

    async def _run_tools(self, turn: _Turn, assistant: dict[str, Any]) -> bool:
        """Run a tool batch segment by segment, persisting after each; False when the turn must stop."""
        calls = assistant["tool_calls"]
        segments = self._segments(calls)
        try:
            for segment in segments:
                if self._interrupt_requested:
                    turn.interrupted, turn.exit_reason = True, "interrupted"
                    return False
                turn.messages.extend(await self._run_segment(turn, segment))
                if await self._flush(turn) is False:
                    self._stop_for_persistence(turn)
                    return False
        except asyncio.CancelledError:
            _, missing = missing_tool_results(turn.messages)
            turn.messages.extend(cancelled_tool_message(call, "later") for call in missing)
            raise
        return True

    def _segments(self, calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """Split a batch: runs of parallel-safe calls share a segment, any other call is alone."""
        segments: list[list[dict[str, Any]]] = []
        previous_parallel = False
        for call in calls:
            tool = self._tools.get((call.get("function") or {}).get("name") or "")
            parallel = tool is not None and tool.parallel_safe
            if parallel and previous_parallel:
                segments[-1].append(call)
            else:
                segments.append([call])
            previous_parallel = parallel
        return segments

    async def _run_segment(self, turn: _Turn, segment: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if len(segment) == 1:
            call = segment[0]
            try:
                return [self._result_message(call, await self._invoke(call))]
            except asyncio.CancelledError:
                turn.messages.append(cancelled_tool_message(call, "skipped"))
                raise
        tasks = [asyncio.ensure_future(self._invoke(call)) for call in segment]
        try:
            results = await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            try:
                await asyncio.wait(tasks)
            except asyncio.CancelledError:
                pass  # cancelled again: report what finished, then re-raise below
            for call, task in zip(segment, tasks):
                if task.done() and not task.cancelled() and task.exception() is None:
                    turn.messages.append(self._result_message(call, task.result()))
                else:
                    turn.messages.append(cancelled_tool_message(call, "killed"))
            raise
        return [self._result_message(call, text) for call, text in zip(segment, results)]

    @staticmethod
    def _result_message(call: dict[str, Any], text: str) -> dict[str, Any]:
        return tool_message(call.get("id") or "", (call.get("function") or {}).get("name") or "", text)

    async def _invoke(self, call: dict[str, Any]) -> str:
        function = call.get("function") or {}
        name = function.get("name") or ""
        tool = self._tools.get(name)
        if tool is None:
            return f"Error: unknown tool '{name}'"
        raw = function.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except (TypeError, ValueError) as exc:
            return f"Error: invalid JSON arguments for {name}: {exc}"
        if not isinstance(arguments, dict):
            return f"Error: arguments for {name} must be a JSON object"
        context = ToolContext(agent=self, session_id=self.session_id, tool_call_id=call.get("id") or "")
        try:
            text = render_result(await tool.handler(arguments, context))
        except Exception as exc:
            log.info("tool %s failed: %s", name, exc)
            return f"Error executing tool {name}: {type(exc).__name__}: {exc}"
        if len(text) > self.max_tool_result_chars:
            text = text[: self.max_tool_result_chars] + f"\n[truncated: {len(text)} characters in total]"
        return text

    async def _get_session_db_for_recall(self) -> Any:
        """The store for ``session_search``: the agent's own, or ``$HERMES_HOME/state.db`` opened now.

        A store opened here is owned by the agent: the turn is persisted into
        it from now on and :meth:`close` closes it. None when persistence is disabled.
        """
        if self._persist_disabled:
            return None
        if self._session_db is None and not self._closing:
            from hermes_state import SessionDB

            self._session_db = SessionDB()
            self._owns_session_db = True
        return self._session_db

    # ---------------------------------------------------------------- compaction

    async def _maybe_compress(self, turn: _Turn) -> None:
        threshold = self.compression_threshold_tokens
        if threshold is None or turn.compression_attempts >= self.max_compression_attempts:
            return
        if estimate_tokens(wire_messages(self._cached_system_prompt, turn.messages)) < threshold:
            return
        turn.compression_attempts += 1
        if await self._compress(turn) is None:
            turn.compression_attempts -= 1  # skipped for another holder's lease: the attempt is given back

    async def _compress(self, turn: _Turn) -> bool | None:
        """Summarize everything before the last user message; True done, False failed, None skipped (lease)."""
        cut = max((i for i, m in enumerate(turn.messages) if m.get("role") == "user"), default=0)
        if cut == 0:
            return False
        db = None if self._persist_disabled else self._session_db
        session_id = self.session_id
        holder: str | None = None
        refresher: asyncio.Task[None] | None = None
        if db is not None:
            if not await self._ensure_db_session():
                return False
            holder = (f"pid={os.getpid()}:task={_task_name()}:agent={id(self):x}:"
                      f"nonce={secrets.token_hex(4)}")
            try:
                acquired = await db.try_acquire_compression_lock(session_id, holder, self.compression_lock_ttl)
            except Exception as exc:
                log.warning("compression lease for %s not acquired: %s", session_id, exc)
                acquired = False
            if not acquired:
                return None
            self._compression_holder = holder
            refresher = asyncio.ensure_future(self._refresh_lease(db, session_id, holder))
        try:
            watermark = None
            if db is not None:
                if await self._flush(turn) is False:
                    return False
                # Rows anyone appends while the summary is written come after it (never lost).
                watermark = await db.get_active_message_watermark(session_id)
            summary = await self._summarize(turn.messages[:cut])
            # The kept tail starts with a user message; an assistant-role summary keeps roles alternating.
            compacted = [{"role": "assistant", "content": COMPACTION_PREFIX + summary, "display_kind": "hidden"}]
            compacted += turn.messages[cut:]
            await finish_owned(self._commit_compaction(turn, db, session_id, holder, compacted, watermark))
            return True
        except Exception as exc:
            log.warning("compression of %s failed: %s", session_id, exc)
            return False
        finally:
            if refresher is not None:
                refresher.cancel()
            self._compression_holder = None
            if db is not None and holder is not None:
                try:
                    await finish_owned(db.release_compression_lock(session_id, holder))
                except Exception as exc:
                    log.warning("compression lease of %s not released: %s", session_id, exc)

    async def _refresh_lease(self, db: Any, session_id: str, holder: str) -> None:
        while True:
            await asyncio.sleep(max(self.compression_lock_ttl / 3, 0.05))
            try:
                await db.refresh_compression_lock(session_id, holder, self.compression_lock_ttl)
            except Exception as exc:
                log.debug("compression lease refresh failed: %s", exc)

    async def _summarize(self, messages: list[dict[str, Any]]) -> str:
        request = ProviderRequest(
            messages=[{"role": "system", "content": _SUMMARY_SYSTEM}, *wire_messages(None, messages),
                      {"role": "user", "content": _SUMMARY_INSTRUCTION}],
            tools=[],
            model=self.model,
            max_tokens=self.max_tokens,
            purpose="compression",
        )
        reply = await self.provider.complete(request)
        text = reply.message.get("content")
        if not isinstance(text, str) or not text.strip():
            raise ProviderError("the provider returned an empty summary")
        record = getattr(self._session_db, "record_auxiliary_usage", None)
        if reply.usage is not None and not self._persist_disabled and inspect.iscoroutinefunction(record):
            counts = {k: v for k, v in reply.usage.as_dict().items() if k != "estimated_cost_usd"}
            try:
                await record(self.session_id, "compression", model=self.model or None,
                             billing_provider=getattr(self.provider, "name", None),
                             billing_base_url=getattr(self.provider, "base_url", None),
                             estimated_cost_usd=reply.usage.estimated_cost_usd, **counts)
            except Exception as exc:
                log.debug("auxiliary usage not recorded: %s", exc)
        return text.strip()

    async def _commit_compaction(
        self, turn: _Turn, db: Any, session_id: str, holder: str | None, compacted: list[dict[str, Any]],
        watermark: int | None,
    ) -> None:
        """Swap the transcript for ``compacted``, durably first (runs whole, shielded from cancellation).

        Rows other writers appended after ``watermark`` follow the summary;
        the in-memory transcript is then reloaded so the model sees them too.
        """
        rows = [append_kwargs(m) for m in compacted]
        writer = self._turn_lease or db  # fenced by the turn lease when the turn holds one
        inserted = len(rows)
        async with self._persist_lock:
            if db is not None and self.compression_in_place:
                inserted = await writer.archive_and_compact(session_id, rows, watermark=watermark, lock_holder=holder)
            elif db is not None:
                child = new_session_id()
                await writer.publish_compression_child(
                    parent_session_id=session_id, child_session_id=child, source=self._source,
                    messages=rows, model=self.model or None, model_config=self._model_config,
                    system_prompt=self._cached_system_prompt, cwd=self._cwd, profile_name=self._profile_name,
                    compression_lock_holder=holder, require_compression_lease=True, watermark=watermark,
                )
                self.session_id = child
                inserted = (await db.get_session(child) or {}).get("message_count", inserted)
            for message in compacted:
                message.pop(PERSISTED, None)
                if db is not None:
                    message[PERSISTED] = True
            turn.messages[:] = compacted
            turn.durable = set()
            turn.compressions += 1
            if db is not None and inserted > len(rows):
                reloaded = await db.get_messages_as_conversation(self.session_id)
                turn.messages[:] = reloaded
                turn.durable = {id(m) for m in reloaded}
        if db is not None and not self.compression_in_place:
            await self._renumber_title(db, session_id, self.session_id)

    @staticmethod
    async def _renumber_title(db: Any, old: str, new: str) -> None:
        get_title = getattr(db, "get_session_title", None)
        next_title = getattr(db, "get_next_title_in_lineage", None)
        set_title = getattr(db, "set_session_title", None)
        if get_title is None or next_title is None or set_title is None:
            return
        try:
            title = await get_title(old)
            if title:
                await set_title(new, await next_title(title))
        except Exception as exc:
            log.warning("title of compression child %s not set: %s", new, exc)

    # ---------------------------------------------------------------------- close

    async def _close_now(self) -> None:
        active = self._active_turn_task
        if active is not None and active is not asyncio.current_task() and not active.done():
            active.cancel()
            await asyncio.wait({active})  # its shielded finalizer persists the turn first
        self._closed = True
        if self._close_provider:
            closer = getattr(self.provider, "aclose", None)
            if callable(closer):
                try:
                    await closer()
                except Exception as exc:
                    log.warning("provider close failed: %s", exc)
        db, owned = self._session_db, self._owns_session_db
        if db is not None and self._end_session_on_close and not self._persist_disabled:
            try:
                await db.end_session(self.session_id, "agent_close")  # first reason wins
            except Exception as exc:
                log.warning("could not end session %s: %s", self.session_id, exc)
        if db is not None and owned:
            try:
                await db.close()
            except Exception as exc:
                log.warning("could not close the agent's store: %s", exc)
        self._session_db = None
        self._owns_session_db = False


def _task_name() -> str:
    task = asyncio.current_task()
    return task.get_name() if task is not None else "none"


def _assistant_dict(reply: ProviderReply) -> dict[str, Any]:
    message = {k: v for k, v in reply.message.items() if not k.startswith("_")}
    message["role"] = "assistant"
    calls = []
    for call in message.get("tool_calls") or []:
        function = dict(call.get("function") or {})
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            function["arguments"] = json.dumps(arguments or {})
        calls.append({"id": call.get("id") or f"call_{secrets.token_hex(6)}", "type": "function",
                      "function": {"name": function.get("name") or "", "arguments": function["arguments"]}})
    if calls:
        message["tool_calls"] = calls
    else:
        message.pop("tool_calls", None)
    if reply.finish_reason and "finish_reason" not in message:
        message["finish_reason"] = reply.finish_reason
    message.setdefault("timestamp", time.time())
    return message
