"""Listing, counting and reading helpers for hosts and their CLIs, plus session metadata.

Everything here validates its arguments in the caller's task: a wrong type
raises ``TypeError`` and an impossible value (a negative limit, say) raises
``ValueError`` naming the argument, before any I/O. Reads go to the reader
connection; writes are commands for the writer actor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..commands.listing import (
    BackfillRepoRoots,
    ClearMessages,
    ClearSessionActivityLabels,
    PatchModelConfig,
    SetLatestUserApiContent,
    TouchSessionActivity,
    UpdateBillingRoute,
    UpdateSessionCwd,
)
from ..encoding import encode_content, scrub_surrogates
from ..errors import OperationalError, StoreClosedError
from ..facade import ACTIVITY_PATIENCE, StoreBase, flag_arg, opt_text, require_id
from ..limits import finite_arg, int64_arg, json_text

__all__ = [
    "ACTIVITY_DESCRIPTION_MAX",
    "ACTIVITY_PROVENANCES",
    "ListingMethods",
    "bound_activity_description",
    "finite_number",
    "flag_arg",
    "limit_arg",
    "normalize_activity_provenance",
    "str_list_arg",
]

log = logging.getLogger("hermes_state")

ACTIVITY_DESCRIPTION_MAX = 120
ACTIVITY_PROVENANCES = ("unknown", "agent.compression", "agent.compression_timeout", "agent.compression_cooldown")


# ------------------------------------------------------------------ validators

# ``list_sessions_rich(sort=...)``: newest start first (the default), costliest first, longest first.
SESSION_SORTS = ("started", "cost", "messages")


def _narrowing(model: Any, tool_name: Any, min_cost: Any, sort: Any = None) -> dict[str, Any]:
    """The keyword-only filters ``list_sessions_rich`` and ``session_count`` share beyond upstream's."""
    if sort is not None and sort not in SESSION_SORTS:
        raise ValueError(f"sort must be one of {', '.join(SESSION_SORTS)} or None, not {sort!r}")
    return {
        "model": opt_text(model, "model"),
        "tool_name": opt_text(tool_name, "tool_name"),
        "min_cost": None if min_cost is None else finite_number(min_cost, "min_cost"),
        "sort": sort or "started",
    }


def limit_arg(value: Any, name: str) -> int:
    """A non-negative 64-bit int (``bool`` is refused): ``TypeError`` / ``ValueError`` otherwise."""
    value = int64_arg(value, name)
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


# Any 64-bit int except ``bool``; a finite int or float as a float.
int_arg = int64_arg
finite_number = finite_arg


def str_list_arg(value: Any, name: str) -> list[str] | None:
    """None, or a list/tuple/set of strings. A bare string is refused (it is not a list of sources)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection) or isinstance(value, Mapping):
        raise TypeError(f"{name} must be a list of strings, not {type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must contain only strings, found {type(item).__name__}")
    return items


def json_object_text(value: Mapping[str, Any], name: str) -> str:
    """Serialise a mapping as JSON within the limits of :func:`~hermes_state.limits.json_text`."""
    return json_text(dict(value), name)


def bound_activity_description(description: Any) -> str:
    """Strip an activity description and clamp it to 120 characters (ending in ``...`` when cut)."""
    text = scrub_surrogates(description).strip() if isinstance(description, str) else ""
    if len(text) <= ACTIVITY_DESCRIPTION_MAX:
        return text
    return text[: ACTIVITY_DESCRIPTION_MAX - 3] + "..."


def normalize_activity_provenance(provenance: Any) -> str:
    """One of :data:`ACTIVITY_PROVENANCES`; anything unrecognised (or None) is ``"unknown"``."""
    value = getattr(provenance, "value", provenance)
    value = value.strip() if isinstance(value, str) else ""
    return value if value in ACTIVITY_PROVENANCES else "unknown"


def _is_lock_timeout(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and ("locked" in text or "busy" in text)


class ListingMethods(StoreBase):
    """Listing, counting and reading helpers for hosts and their CLIs, plus session metadata."""

    if TYPE_CHECKING:  # provided by UsageMethods and TitleMethods in the composed SessionDB

        async def flush_token_counts(self, timeout: float = 5.0) -> bool: ...

        @staticmethod
        def session_unread(session_row: Mapping[str, Any]) -> bool: ...

    # ------------------------------------------------------------ listing

    @staticmethod
    def _filter_options(
        *,
        source: Any = None,
        sources: Any = None,
        exclude_sources: Any = None,
        cwd_prefix: Any = None,
        min_message_count: Any = 0,
        include_archived: Any = False,
        archived_only: Any = False,
        session_key: Any = None,
    ) -> dict[str, Any]:
        return {
            "source": opt_text(source, "source"),
            "sources": str_list_arg(sources, "sources"),
            "exclude_sources": str_list_arg(exclude_sources, "exclude_sources"),
            "cwd_prefix": opt_text(cwd_prefix, "cwd_prefix"),
            "min_message_count": int_arg(min_message_count or 0, "min_message_count"),
            "include_archived": flag_arg(include_archived, "include_archived"),
            "archived_only": flag_arg(archived_only, "archived_only"),
            "session_key": opt_text(session_key, "session_key"),
        }

    async def list_sessions_rich(
        self,
        source: str | None = None,
        sources: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        min_message_count: int = 0,
        project_compression_tips: bool = True,
        order_by_last_active: bool = False,
        include_archived: bool = False,
        archived_only: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
        session_key: str | None = None,
        include_hidden: bool = False,
        *,
        started_after: float | None = None,
        started_before: float | None = None,
        pinned_only: bool = False,
        model: str | None = None,
        tool_name: str | None = None,
        min_cost: float | None = None,
        sort: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return one page of sessions for a picker or sidebar, as rich row dicts.

        Each row has every ``sessions`` column (``system_prompt`` resolved;
        with ``compact_rows`` the two prompt columns are left out) plus
        ``last_active``, ``preview`` (first user turn, at most 60 characters
        + ``...``) and ``unread``. Unless ``include_children``, only roots,
        /branch and reset children are listed (never delegate sub-agents).
        ``source`` wins over ``sources``; ``cwd_prefix`` matches the directory
        and everything below it. Default order is ``started_at`` descending;
        ``order_by_last_active`` ranks by the freshest activity anywhere in a
        row's compression chain and is the only mode that applies
        ``id_query`` / ``search_query``. ``include_pinned`` appends pinned
        rows missing from the page. Hidden sessions (:meth:`set_session_hidden`)
        are left out unless ``include_hidden``; a pinned hidden one stays hidden.
        This store's keyword-only additions: ``pinned_only`` lists pinned rows
        only, ``started_after`` / ``started_before`` (epoch seconds) keep rows
        that started at or after / before that time; like the other filters
        they apply in both orders. With ``project_compression_tips`` a
        compression-ended row shows its live tip (``_lineage_root_id`` keeps
        the listed id). Queued token counts are flushed first.

        More keyword-only additions: ``model`` keeps sessions whose model is
        exactly that, ``tool_name`` those with a message of that tool,
        ``min_cost`` those whose cost (actual when known, else estimated) is at
        least that many dollars; ``sort`` orders the page by ``"started"``
        (newest first, the default), ``"cost"`` or ``"messages"`` (largest
        first; ties newest first). ``order_by_last_active`` wins over ``sort``.
        """
        opts = self._filter_options(
            source=source, sources=sources, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            min_message_count=min_message_count, include_archived=include_archived,
            archived_only=archived_only, session_key=session_key,
        )
        opts.update(
            limit=limit_arg(limit, "limit"),
            offset=limit_arg(offset, "offset"),
            include_children=flag_arg(include_children, "include_children"),
            project_compression_tips=flag_arg(project_compression_tips, "project_compression_tips"),
            order_by_last_active=flag_arg(order_by_last_active, "order_by_last_active"),
            id_query=opt_text(id_query, "id_query"),
            search_query=opt_text(search_query, "search_query"),
            compact_rows=flag_arg(compact_rows, "compact_rows"),
            include_pinned=flag_arg(include_pinned, "include_pinned"),
            exclude_hidden=not flag_arg(include_hidden, "include_hidden"),
            pinned_only=flag_arg(pinned_only, "pinned_only"),
            started_after=None if started_after is None else finite_number(started_after, "started_after"),
            started_before=None if started_before is None else finite_number(started_before, "started_before"),
            **_narrowing(model, tool_name, min_cost, sort),
        )
        await self.flush_token_counts()
        rows = await self._query("list_sessions_rich", opts)
        for row in rows:
            row["unread"] = self.session_unread(row)
        return rows

    async def get_session_rich_row(self, session_id: str, compact_rows: bool = False) -> dict[str, Any] | None:
        """Return one session in the ``list_sessions_rich`` row shape (without ``unread``), or None."""
        session_id = require_id(session_id)
        compact = flag_arg(compact_rows, "compact_rows")
        await self.flush_token_counts()
        return await self._query("session_rich_row", session_id, compact)

    async def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        """Return the exact id, else the only session id starting with the prefix; None when none or several match."""
        return await self._query("resolve_session_id", require_id(session_id_or_prefix, "session_id_or_prefix"))

    # ----------------------------------------------------------- counters

    async def session_count(
        self,
        source: str | None = None,
        sources: list[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: list[str] | None = None,
        *,
        include_hidden: bool = True,
        pinned_only: bool = False,
        started_after: float | None = None,
        started_before: float | None = None,
        model: str | None = None,
        tool_name: str | None = None,
        min_cost: float | None = None,
    ) -> int:
        """Return how many sessions match the ``list_sessions_rich`` filters.

        Children are counted unless ``exclude_children`` (which counts exactly
        the rows ``list_sessions_rich`` can list); archived ones are not
        counted unless ``include_archived`` or ``archived_only``. The
        keyword-only filters mean what they mean for ``list_sessions_rich``
        (hidden sessions are counted unless ``include_hidden=False``).
        """
        opts = self._filter_options(
            source=source, sources=sources, exclude_sources=exclude_sources, cwd_prefix=cwd_prefix,
            min_message_count=min_message_count, include_archived=include_archived, archived_only=archived_only,
        )
        opts["exclude_children"] = flag_arg(exclude_children, "exclude_children")
        opts.update(
            exclude_hidden=not flag_arg(include_hidden, "include_hidden"),
            pinned_only=flag_arg(pinned_only, "pinned_only"),
            started_after=None if started_after is None else finite_number(started_after, "started_after"),
            started_before=None if started_before is None else finite_number(started_before, "started_before"),
            **_narrowing(model, tool_name, min_cost),
        )
        return await self._query("count_sessions", opts)

    async def session_count_by_source(
        self, *, include_archived: bool = False, archived_only: bool = False, exclude_children: bool = False
    ) -> dict[str, int]:
        """Return ``{source: count}``, largest first; an empty or NULL source counts as ``"cli"``.

        After ``close()`` this raises ``RuntimeError("SessionDB connection is
        closed")`` (the reference store's wording for this one method).
        """
        opts = self._filter_options(include_archived=include_archived, archived_only=archived_only)
        opts["exclude_children"] = flag_arg(exclude_children, "exclude_children")
        if self.closed:
            raise StoreClosedError("SessionDB connection is closed")
        return await self._query("count_sessions_by_source", opts)

    async def session_count_ge(self, n: int = 1) -> bool:
        """Return whether at least ``n`` sessions exist (archived included); always True for ``n <= 0``."""
        return await self._query("sessions_at_least", int_arg(n, "n"))

    async def count_empty_sessions(self) -> int:
        """Return how many ended, non-archived sessions have ``message_count = 0``."""
        return await self._query("count_empty_sessions")

    async def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Return ``[{cwd, sessions, last_active}]`` for every non-empty cwd, ordered by cwd.

        ``last_active`` is the newest ``ended_at`` (else ``started_at``) among
        that directory's sessions.
        """
        return await self._query("distinct_session_cwds", flag_arg(include_archived, "include_archived"))

    async def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[dict[str, Any]]:
        """Return ``[{id, title, content}]`` for titled sessions whose first user turn is an expanded /skill.

        Newest sessions first; ``content`` is the stored first user message.
        """
        return await self._query("skill_scaffolded_sessions", limit_arg(limit, "limit"))

    async def get_first_assistant_text(self, session_id: str) -> str:
        """Return the first assistant reply's text ("" when there is none or it is not text)."""
        return await self._query("first_assistant_text", require_id(session_id))

    # ---------------------------------------------------------- metadata

    async def update_session_cwd(
        self,
        session_id: str,
        cwd: str,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> None:
        """Record the session's working directory. Returns None.

        ``git_branch`` / ``git_repo_root`` are written only when non-empty
        (a failed probe never erases a known value), except with
        ``replace_git_meta``, where empty means NULL (the workspace moved).
        An empty ``session_id`` or ``cwd`` is a no-op.
        """
        if session_id is None or session_id == "" or cwd is None or cwd == "":
            return
        branch = (opt_text(git_branch, "git_branch") or "").strip() or None
        root = (opt_text(git_repo_root, "git_repo_root") or "").strip() or None
        cwd_text = opt_text(cwd, "cwd")
        await self._write(
            UpdateSessionCwd(
                session_id=require_id(session_id), cwd=scrub_surrogates(cwd_text or ""),
                git_branch=branch, git_repo_root=root,
                replace_git_meta=flag_arg(replace_git_meta, "replace_git_meta"),
            )
        )

    async def update_session_runtime_lock(
        self,
        session_id: str,
        *,
        model: str | None = None,
        provider: str | None = None,
        model_options: dict[str, Any] | None = None,
        route_source: str | None = None,
        confirmed: bool = False,
    ) -> None:
        """Store ``model_config.browser_model_lock`` for the session. Returns None.

        The lock is ``{provider, model, model_options, route_source,
        confirmed, updated_at}`` (missing strings become ``""``); other
        ``model_config`` keys are kept, ``model`` is set when given, and the
        stored system prompt is dropped. Unknown sessions are a no-op.
        """
        if model_options is not None and not isinstance(model_options, Mapping):
            raise TypeError(f"model_options must be a dict or None, not {type(model_options).__name__}")
        lock = {
            "provider": opt_text(provider, "provider") or "",
            "model": opt_text(model, "model") or "",
            "model_options": dict(model_options or {}),
            "route_source": opt_text(route_source, "route_source") or "",
            "confirmed": bool(confirmed),
            "updated_at": time.time(),
        }
        await self._write(
            PatchModelConfig(
                session_id=require_id(session_id),
                patch_json=json_object_text({"browser_model_lock": lock}, "model_options"),
                runtime_lock=True,
                runtime_lock_model=model,
            )
        )

    async def update_session_billing_route(
        self, session_id: str, *, provider: str | None, base_url: str | None, billing_mode: str | None = None
    ) -> None:
        """Overwrite the billing provider and base URL (and the mode when given); drops the stored prompt.

        Returns None; unknown sessions are a no-op.
        """
        await self._write(
            UpdateBillingRoute(
                session_id=require_id(session_id),
                provider=opt_text(provider, "provider"),
                base_url=opt_text(base_url, "base_url"),
                billing_mode=opt_text(billing_mode, "billing_mode"),
            )
        )

    async def patch_session_model_config(self, session_id: str, patch: dict[str, Any]) -> bool:
        """Merge ``patch`` into ``model_config`` key by key; a None value removes that key.

        Returns True when the session exists and was updated. An empty
        ``session_id``, a patch that is not a non-empty dict, or an unknown
        session is a no-op returning False. A config left empty is stored as NULL.
        """
        if not session_id or not isinstance(patch, Mapping) or not patch:
            return False
        text = json_object_text(patch, "patch")
        return bool(await self._write(PatchModelConfig(session_id=require_id(session_id), patch_json=text)))

    async def get_session_model_config_value(self, session_id: str, key: str, default: Any = None) -> Any:
        """Return ``model_config[key]``, or ``default`` when the session, the key or valid JSON is missing."""
        from ..previews import parse_model_config

        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        _exists, text = await self._query("session_model_config", require_id(session_id))
        return parse_model_config(text).get(key, default)

    async def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> int:
        """Fill an empty ``git_repo_root`` for every session whose ``cwd`` is a key of the mapping.

        Recorded roots are never overwritten; empty keys or roots are skipped.
        Returns the number of sessions changed.
        """
        if not isinstance(cwd_to_root, Mapping):
            raise TypeError(f"cwd_to_root must be a dict, not {type(cwd_to_root).__name__}")
        pairs = []
        for cwd, root in cwd_to_root.items():
            if not isinstance(cwd, str) or not (root is None or isinstance(root, str)):
                raise TypeError("cwd_to_root must map str cwd -> str repo root")
            if cwd and root:
                pairs.append((cwd, root))
        if not pairs:
            return 0
        return int(await self._write(BackfillRepoRoots(pairs=tuple(pairs))))

    # ---------------------------------------------------------- activity

    async def touch_session_activity(
        self,
        session_id: str,
        ts: float | None = None,
        *,
        description: str | None = None,
        provenance: str | None = None,
    ) -> bool:
        """Stamp mid-turn activity; the stored stamp never moves backwards.

        ``ts`` defaults to now. ``description`` is stripped and clamped to
        120 characters; ``provenance`` must be one of
        :data:`ACTIVITY_PROVENANCES` (anything else is stored as
        ``"unknown"``). This is an observation, so it waits at most 0.5 s for
        the file lock and then gives up. Returns True when the stamp was
        written, False when a newer one was already stored, the session is
        unknown or the lock stayed busy. An empty ``session_id`` is a no-op.
        """
        if session_id is None or session_id == "":
            return False
        when = time.time() if ts is None else finite_number(ts, "ts")
        if description is not None and not isinstance(description, str):
            raise TypeError(f"description must be a str or None, not {type(description).__name__}")
        command = TouchSessionActivity(
            session_id=require_id(session_id),
            at=when,
            description=bound_activity_description(description),
            provenance=normalize_activity_provenance(provenance),
        )
        return await self._activity_write(command)

    async def clear_session_activity_labels(self, session_id: str) -> bool:
        """Blank the activity description and set provenance ``"unknown"``, keeping the timestamp.

        Skips the write when the labels are already clear. Returns True when
        labels were cleared; like :meth:`touch_session_activity` it waits at
        most 0.5 s for the file lock.
        """
        if session_id is None or session_id == "":
            return False
        session_id = require_id(session_id)
        row = await self._query("session_activity_row", session_id)
        if row is None or (not row[1] and (row[2] or "unknown") == "unknown"):
            return False
        return await self._activity_write(ClearSessionActivityLabels(session_id=session_id))

    async def _activity_write(self, command: TouchSessionActivity | ClearSessionActivityLabels) -> bool:
        try:
            return bool(await self._write(command, patience=ACTIVITY_PATIENCE))
        except OperationalError as exc:
            if not _is_lock_timeout(exc):
                raise
            log.debug("activity write for %s skipped: %s", command.session_id, exc)
            return False

    async def get_session_activity(self, session_id: str) -> dict[str, Any] | None:
        """Return the activity snapshot, or None for an unknown session.

        Keys: ``last_activity_at``, ``last_activity_description``,
        ``last_activity_provenance``, ``seconds_since_activity`` (never
        negative; None without a stamp) and the aliases ``last_activity_ts``,
        ``last_activity_desc``, ``description``, ``provenance``.
        """
        row = await self._query("session_activity_row", require_id(session_id))
        if row is None:
            return None
        at = None if row[0] is None else float(row[0])
        description = bound_activity_description(row[1])
        provenance = normalize_activity_provenance(row[2])
        elapsed = None if at is None else round(max(0.0, time.time() - at), 1)
        return {
            "last_activity_at": at,
            "last_activity_description": description,
            "last_activity_provenance": provenance,
            "seconds_since_activity": elapsed,
            "last_activity_ts": at,
            "last_activity_desc": description,
            "description": description,
            "provenance": provenance,
        }

    # ----------------------------------------------------------- messages

    async def clear_messages(self, session_id: str) -> None:
        """Delete every message of the session (inactive ones too) and zero its counters. Returns None."""
        await self._write(ClearMessages(session_id=require_id(session_id)))

    async def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """Return ``{window, messages_before, messages_after}`` around one message.

        ``window`` holds up to ``window`` rows before the anchor, the anchor
        and up to ``window`` rows after it (any active state, decoded like
        :meth:`get_messages`, id order); the counts say how many rows of the
        window are before and after the anchor. An anchor that is not in the
        session gives an empty window. A negative ``window`` counts as 0.
        """
        anchor = int_arg(around_message_id, "around_message_id")
        span = max(0, int_arg(window, "window"))
        return await self._query("messages_around", require_id(session_id), anchor, span)

    async def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """Return :meth:`get_messages_around` plus ``bookend_start`` and ``bookend_end``.

        The window keeps only ``keep_roles`` (the anchor always stays; None
        keeps every role). The bookends are the session's first ``bookend``
        rows before the window and last ``bookend`` rows after it, limited to
        ``keep_roles`` and non-empty content, oldest first. Negative sizes
        count as 0.
        """
        roles = str_list_arg(keep_roles, "keep_roles")
        return await self._query(
            "anchored_view",
            require_id(session_id),
            int_arg(around_message_id, "around_message_id"),
            max(0, int_arg(window, "window")),
            max(0, int_arg(bookend, "bookend")),
            None if roles is None else tuple(roles),
        )

    async def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """Return the newest real user turns as ``[{id, timestamp, preview}]``, newest first.

        Rows with a ``display_kind`` (synthetic turns) are skipped; the
        preview is one line of at most 80 characters.
        """
        return await self._query(
            "recent_user_messages",
            require_id(session_id),
            limit_arg(limit, "limit"),
            flag_arg(include_inactive, "include_inactive"),
        )

    async def latest_message_row_id(
        self, session_id: str, *, role: str = "user", offset: int = 0, require_text: bool = True
    ) -> int | None:
        """Return the id of the newest active ``user`` or ``assistant`` row (skipping ``offset`` of them).

        ``require_text`` skips rows without non-blank content. Returns None
        when there is no such row, for another role, an empty id or a
        negative offset.
        """
        if not session_id or role not in ("user", "assistant"):
            return None
        offset = int_arg(offset, "offset")
        if offset < 0:
            return None
        return await self._query(
            "latest_message_row_id", require_id(session_id), role, offset, flag_arg(require_text, "require_text")
        )

    async def latest_user_message_row_id(self, session_id: str) -> int | None:
        """Return the id of the newest active user row with text, or None."""
        return await self.latest_message_row_id(session_id, role="user")

    async def get_message_role(self, session_id: str, row_id: int) -> str | None:
        """Return the role of an active message of this session, or None."""
        if not session_id:
            return None
        return await self._query("message_role", require_id(session_id), int_arg(row_id, "row_id"))

    async def has_archived_messages(self, session_id: str) -> bool:
        """Return whether the session has any inactive (compacted, rewound or replaced) rows."""
        return await self._query("has_inactive_messages", require_id(session_id))

    async def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """Return whether a row of the session carries this platform message id (ints compare as text)."""
        if isinstance(platform_message_id, int) and not isinstance(platform_message_id, bool):
            platform_message_id = str(platform_message_id)
        return await self._query(
            "has_platform_message", require_id(session_id), require_id(platform_message_id, "platform_message_id")
        )

    async def set_latest_user_api_content(self, session_id: str, content: Any, api_content: str | None) -> int:
        """Set ``api_content`` on the newest active user row if its stored content equals ``content``.

        ``content`` is compared in its stored (encoded) form. Returns the
        number of rows changed (0 or 1).
        """
        api = opt_text(api_content, "api_content")
        return int(
            await self._write(
                SetLatestUserApiContent(
                    session_id=require_id(session_id),
                    content=encode_content(content),
                    api_content=None if api is None else scrub_surrogates(api),
                )
            )
        )
