"""The ``session_search`` tool: recall past conversations from the session store.

Four calling shapes, chosen by which arguments are set (no mode parameter):

* **discover** (``query``): full-text search, one hit per session lineage,
  each with a ±5 message window around the match and the first/last
  user-assistant messages of the session as bookends;
* **scroll** (``session_id`` + ``around_message_id``): a window around an anchor;
* **read** (``session_id`` only): a whole session (head and tail when long);
* **browse** (nothing): the most recently active sessions.

Every shape returns a JSON string; failures are ``{"error": ..., "success": false}``.
No model is called. The tool never closes a store it was given; stores it
opens itself (the default one, another profile's read-only one) are closed
before it returns.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from hermes_state import SessionDB, hermes_home

from .tools import Tool, ToolContext

__all__ = [
    "HIDDEN_SOURCES",
    "SESSION_SEARCH_GUIDANCE",
    "SESSION_SEARCH_SCHEMA",
    "SESSION_SEARCH_TOOL",
    "active_profile_name",
    "check_session_search_requirements",
    "profile_home",
    "session_search",
]

log = logging.getLogger("hermes_agent.session_search")

HIDDEN_SOURCES = ("kanban", "subagent", "tool")
DEMOTED_SOURCES = ("cron",)
DISCOVER_SCAN_LIMIT = 300
DISCOVER_FIELDS = ("id", "session_id", "role", "snippet", "source", "model", "session_started")
COMPACTION_PREFIXES = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")
WINDOW_CHARS = 4000
BOOKEND_CHARS = 1200
READ_HEAD = 20
READ_TAIL = 10
# End reasons after which a session's transcript is no longer anyone's live context.
LEFT_CONTEXT_REASONS = frozenset({"compression", "new_session", "reset", "session_reset"})

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")

SESSION_SEARCH_GUIDANCE = (
    "You can recall earlier conversations with the session_search tool. Use it to recover "
    "cross-session context before asking the user to repeat something they already told you."
)

SESSION_SEARCH_SCHEMA: dict[str, Any] = {
    "name": "session_search",
    "description": (
        "Search past sessions in the local session database, or scroll inside one. Full-text (FTS5) "
        "retrieval over stored messages; no model calls, every shape returns real messages.\n\n"
        "Source first: this searches conversation history only. When the user names a direct source "
        "(a URL, file, thread, live system), inspect that source first; use session history as "
        "secondary context, never as proof of what the source contains now.\n\n"
        "Calling shapes:\n"
        "1) DISCOVER: query='auth refactor' [limit, sort, role_filter]. One result per session "
        "lineage: snippet, the messages around the match (anchor flagged), bookend_start/bookend_end "
        "(how the session began and ended), match_message_id.\n"
        "2) SCROLL: session_id + around_message_id [window]. A window of messages around the anchor; "
        "re-anchor on the first or last id to scroll backward or forward.\n"
        "3) READ: session_id only. The whole session (first 20 + last 10 messages when long). "
        "Resolve an @session:<profile>/<id> link by passing its id and profile.\n"
        "4) BROWSE: no arguments. The most recently active sessions with previews.\n\n"
        "Cite a session by writing its `link` value (e.g. @session:default/20260101_120000_abc123) "
        "verbatim in your reply.\n\n"
        "FTS5 syntax: terms are AND-ed by default; use OR for alternatives, \"quoted phrases\" for "
        "exact matches, NOT to exclude, and a trailing * for prefixes (deploy*)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Full-text query (discover shape)."},
            "limit": {"type": "integer", "description": "Sessions to return (default 3, 1-10)."},
            "sort": {"type": "string", "enum": ["newest", "oldest"],
                     "description": "Order hits by time instead of relevance."},
            "session_id": {"type": "string",
                           "description": "Session to read, or to scroll with around_message_id."},
            "around_message_id": {"type": "integer", "description": "Anchor message id for the scroll shape."},
            "window": {"type": "integer", "description": "Messages on each side of the anchor (default 5, 1-20)."},
            "role_filter": {"type": "string",
                            "description": "Comma-separated roles to search (default 'user,assistant')."},
            "profile": {"type": "string", "description": "Read another profile's sessions (read-only)."},
        },
        "required": [],
    },
}


# ------------------------------------------------------------------------ profiles


def _profiles_root() -> Path:
    home = hermes_home()
    return home.parent.parent if home.parent.name == "profiles" else home


def active_profile_name() -> str:
    """Return the active profile: the directory name under ``profiles/``, else ``"default"``."""
    home = hermes_home()
    return home.name if home.parent.name == "profiles" else "default"


def profile_home(name: str) -> Path:
    """Return the directory of profile ``name``; raises ``ValueError`` for an invalid name."""
    canon = name.strip().lower()
    if not _PROFILE_NAME.match(canon):
        raise ValueError(f"invalid profile name: {name!r}")
    root = _profiles_root()
    return root if canon == "default" else root / "profiles" / canon


def _all_profile_dbs() -> list[tuple[str, Path]]:
    root = _profiles_root()
    found = [("default", root / "state.db")]
    profiles = root / "profiles"
    if profiles.is_dir():
        for child in sorted(profiles.iterdir()):
            if child.is_dir():
                found.append((child.name, child / "state.db"))
    return found


def _link(session_id: str, profile: str | None) -> str:
    name = (profile or "").strip() or active_profile_name()
    return f"@session:{name}/{session_id}"


def check_session_search_requirements() -> bool:
    """True when ``$HERMES_HOME`` exists (the default store can live there)."""
    return hermes_home().is_dir()


# ------------------------------------------------------------------------- shaping


def _when(ts: Any) -> str:
    if ts is None:
        return "unknown"
    try:
        return datetime.fromtimestamp(float(ts)).strftime("%B %d, %Y at %I:%M %p")
    except (TypeError, ValueError, OSError, OverflowError):
        return str(ts)


def _is_compaction_summary(content: Any) -> bool:
    return isinstance(content, str) and content.lstrip().startswith(COMPACTION_PREFIXES)


def _shape(message: dict[str, Any], *, anchor_id: int | None = None, max_chars: int | None = None) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str) and "\x1b" in content:
        content = _ANSI.sub("", content)
    entry: dict[str, Any] = {
        "id": message.get("id"),
        "role": message.get("role"),
        "content": content,
        "timestamp": message.get("timestamp"),
    }
    for key in ("tool_name", "tool_calls", "tool_call_id"):
        if message.get(key):
            entry[key] = message[key]
    if anchor_id is not None and message.get("id") == anchor_id:
        entry["anchor"] = True
    if max_chars and isinstance(content, str) and len(content) > max_chars:
        entry["content"] = content[:max_chars] + "…"
        entry["content_truncated"] = True
        entry["original_content_chars"] = len(content)
    return {k: v for k, v in entry.items() if v is not None or k == "content"}


def _meta(session: dict[str, Any]) -> dict[str, Any]:
    return {
        "when": _when(session.get("started_at")),
        "source": session.get("source"),
        "model": session.get("model"),
        "title": session.get("title"),
    }


def _error(message: str) -> str:
    return json.dumps({"error": message, "success": False}, ensure_ascii=False)


def _clamp(value: Any, default: int, low: int, high: int) -> int:
    try:
        number = int(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        number = default
    return max(low, min(number, high))


# ------------------------------------------------------------------------ lineage


async def _lineage_root(db: Any, session_id: str | None) -> str | None:
    """Walk ``parent_session_id`` links to the topmost ancestor (cycle-safe, 100 hops)."""
    if not session_id:
        return None
    current, seen = session_id, set()
    for _ in range(100):
        if current in seen:
            break
        seen.add(current)
        try:
            row = await db.get_session(current)
        except Exception:
            log.debug("get_session failed for %s", current, exc_info=True)
            break
        parent = row.get("parent_session_id") if row else None
        if not parent:
            break
        current = parent
    return current


async def _left_live_context(db: Any, session_id: str) -> bool:
    try:
        row = await db.get_session(session_id)
    except Exception:
        return False
    return bool(row) and (row.get("end_reason") or "") in LEFT_CONTEXT_REASONS


async def _storage_state(db: Any, message_id: Any, candidates: list[str]) -> dict[str, Any] | None:
    """Return ``{session_id, active, compacted}`` of a message row, or None when it is not found.

    Uses the store's ``_get_message_storage_state`` when it has one; otherwise
    looks the id up in each candidate session through ``get_messages``.
    """
    if not isinstance(message_id, int) or isinstance(message_id, bool):
        return None
    getter = getattr(db, "_get_message_storage_state", None)
    if callable(getter):
        try:
            row = await getter(message_id)
            return dict(row) if row is not None else None
        except Exception:
            log.debug("_get_message_storage_state failed for %s", message_id, exc_info=True)
    for session_id in dict.fromkeys(candidates):
        if not session_id:
            continue
        try:
            rows = await db.get_messages(session_id, include_inactive=True, after_id=message_id - 1, limit=1)
        except Exception:
            continue
        if rows and rows[0].get("id") == message_id:
            row = rows[0]
            return {"session_id": session_id, "active": row.get("active", 1), "compacted": row.get("compacted", 0)}
    return None


def _is_compacted(state: dict[str, Any] | None) -> bool:
    return state is not None and state.get("active") == 0 and state.get("compacted") == 1


async def _lineage_members(db: Any, session_id: str) -> list[str]:
    members = [session_id]
    getter = getattr(db, "get_compression_lineage", None)
    if callable(getter):
        try:
            members.extend(await getter(session_id))
        except Exception:
            log.debug("get_compression_lineage failed for %s", session_id, exc_info=True)
    return members


# ------------------------------------------------------------------------- shapes


async def _discover(
    db: Any, query: str, roles: list[str], limit: int, sort: str | None, current: str | None, profile: str | None
) -> str:
    current_root = await _lineage_root(db, current) if current else None
    results: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any] | None] = {}

    title_hit = await _title_match(db, query, current_root)
    if title_hit is not None:
        seen[title_hit.pop("_root")] = None
        results.append(title_hit)

    try:
        hits = await db.search_messages(
            query,
            role_filter=roles,
            exclude_sources=list(HIDDEN_SOURCES),
            limit=DISCOVER_SCAN_LIMIT,
            offset=0,
            sort=sort,
            fields=DISCOVER_FIELDS,
        )
    except Exception as exc:
        log.warning("session_search: search failed: %s", exc, exc_info=True)
        return _error(f"Search failed: {exc}")
    # Cron sessions repeat the same vocabulary daily; keep them reachable but behind people.
    hits = sorted(hits, key=lambda h: 1 if (h.get("source") or "") in DEMOTED_SOURCES else 0)

    for hit in hits:
        if len(seen) >= limit:
            break
        hit_session = hit.get("session_id")
        root = await _lineage_root(db, hit_session) or hit_session
        if root in seen:
            continue
        if current_root is not None and root == current_root:
            state = await _storage_state(db, hit.get("id"), [hit_session])
            if not (_is_compacted(state) or await _left_live_context(db, hit_session)):
                continue
        seen[root] = hit

    for root, hit in seen.items():
        if hit is None:
            continue
        entry = await _hydrate_hit(db, root, hit)
        if entry is not None:
            results.append(entry)

    for entry in results:
        entry["link"] = _link(entry["session_id"], profile)
    payload: dict[str, Any] = {"success": True, "mode": "discover", "query": query}
    if not results:
        payload.update(results=[], count=0, message="No matching sessions found.")
    else:
        payload.update(results=results, count=len(results), sessions_searched=len(seen))
    await _note_rebuild(db, payload)
    return json.dumps(payload, ensure_ascii=False)


async def _hydrate_hit(db: Any, root: str, hit: dict[str, Any]) -> dict[str, Any] | None:
    session_id = hit.get("session_id") or root
    anchor = hit.get("id")
    try:
        view = await db.get_anchored_view(session_id, anchor, window=5, bookend=3)
    except Exception as exc:
        log.warning("session_search: anchored view failed for %s/%s: %s", session_id, anchor, exc)
        return None
    try:
        meta = await db.get_session(root) or {}
    except Exception:
        meta = {}
    entry: dict[str, Any] = {
        "session_id": session_id,
        "when": _when(meta.get("started_at") or hit.get("session_started")),
        "source": meta.get("source") or hit.get("source") or "unknown",
        "model": meta.get("model") or hit.get("model") or "unknown",
        "title": meta.get("title") or None,
        "matched_role": hit.get("role"),
        "match_message_id": anchor,
        "snippet": hit.get("snippet") or "",
        "bookend_start": _bookend(view.get("bookend_start")),
        "messages": [_shape(m, anchor_id=anchor, max_chars=WINDOW_CHARS) for m in view.get("window") or []],
        "bookend_end": _bookend(view.get("bookend_end")),
        "messages_before": view.get("messages_before", 0),
        "messages_after": view.get("messages_after", 0),
    }
    if root != session_id:
        entry["parent_session_id"] = root
    return entry


def _bookend(rows: Any) -> list[dict[str, Any]]:
    return [_shape(m, max_chars=BOOKEND_CHARS) for m in rows or [] if not _is_compaction_summary(m.get("content"))]


async def _title_match(db: Any, query: str, current_root: str | None) -> dict[str, Any] | None:
    resolve = getattr(db, "resolve_session_by_title", None)
    title = query.strip().strip("`'\"")
    if not callable(resolve) or not title:
        return None
    try:
        session_id = await resolve(title)
    except Exception:
        log.debug("resolve_session_by_title failed for %r", title, exc_info=True)
        return None
    if not session_id:
        return None
    root = await _lineage_root(db, session_id) or session_id
    if current_root is not None and root == current_root and not await _left_live_context(db, session_id):
        return None
    try:
        meta = await db.get_session(root) or await db.get_session(session_id) or {}
        rows = await db.get_messages(session_id)
    except Exception:
        log.debug("title match hydration failed for %s", session_id, exc_info=True)
        return None
    if meta.get("source") in HIDDEN_SOURCES:
        return None
    anchor = rows[0].get("id") if rows else None
    view: dict[str, Any] = {}
    if anchor is not None:
        try:
            view = await db.get_anchored_view(session_id, anchor, window=5, bookend=3)
        except Exception:
            log.debug("anchored view failed for title match %s", session_id, exc_info=True)
    entry: dict[str, Any] = {
        "session_id": session_id,
        "when": _when(meta.get("started_at")),
        "source": meta.get("source") or "unknown",
        "model": meta.get("model") or "unknown",
        "title": meta.get("title") or title,
        "matched_role": "session_title",
        "match_message_id": anchor,
        "snippet": f"Session title matched: {meta.get('title') or title}",
        "bookend_start": _bookend(view.get("bookend_start") if view else rows[:3]),
        "messages": [_shape(m, anchor_id=anchor, max_chars=WINDOW_CHARS) for m in (view.get("window") if view else rows[:5]) or []],
        "bookend_end": _bookend(view.get("bookend_end") if view else rows[-3:]),
        "messages_before": view.get("messages_before", 0),
        "messages_after": view.get("messages_after", max(len(rows) - 5, 0)),
        "_root": root,
    }
    if root != session_id:
        entry["parent_session_id"] = root
    return entry


async def _note_rebuild(db: Any, payload: dict[str, Any]) -> None:
    status_fn = getattr(db, "fts_rebuild_status", None)
    if not callable(status_fn):
        return
    try:
        status = await status_fn()
    except Exception:
        return
    if not status:
        return
    payload["index_rebuild"] = {
        "percent": status.get("percent"),
        "note": (
            f"The search index is still being rebuilt ({status.get('percent')}% done, "
            f"{status.get('indexed')} of {status.get('total')} messages); older messages may be missing "
            "from results until it finishes."
        ),
    }


async def _scroll(db: Any, session_id: str, around: Any, window: Any, current: str | None) -> str:
    try:
        anchor = int(around)
    except (TypeError, ValueError):
        return _error("scroll requires an integer around_message_id")
    window = _clamp(window, 5, 1, 20)
    state = await _storage_state(db, anchor, await _lineage_members(db, session_id))
    owner = state.get("session_id") if state else None

    if current:
        anchor_session = owner or session_id
        anchor_root = await _lineage_root(db, anchor_session)
        if anchor_root is not None and anchor_root == await _lineage_root(db, current):
            rewound = state is not None and state.get("active") == 0 and not _is_compacted(state)
            out_of_context = not rewound and await _left_live_context(db, anchor_session)
            if not (_is_compacted(state) or out_of_context):
                return _error(
                    "scroll rejected: the anchor is in the current session lineage (already in your context)"
                )

    meta = await _existing_session(db, session_id)
    if not meta:
        return _error(f"session_id not found: {session_id}")
    try:
        view = await db.get_messages_around(session_id, anchor, window=window)
    except Exception as exc:
        log.warning("session_search: get_messages_around failed: %s", exc)
        return _error(f"failed to load messages: {exc}")

    warning = None
    if not view.get("window") and owner and owner != session_id:
        if await _lineage_root(db, owner) == await _lineage_root(db, session_id):
            try:
                moved = await db.get_messages_around(owner, anchor, window=window)
            except Exception:
                moved = {}
            if moved.get("window"):
                warning = f"around_message_id {anchor} lives in {owner} (same lineage as {session_id}); read from there"
                view, session_id = moved, owner
                meta = await db.get_session(owner) or meta
    if not view.get("window"):
        return _error(f"around_message_id {anchor} not in session_id {session_id}")

    payload: dict[str, Any] = {
        "success": True,
        "mode": "scroll",
        "session_id": session_id,
        "around_message_id": anchor,
        "session_meta": _meta(meta),
        "window": window,
        "messages": [_shape(m, anchor_id=anchor) for m in view["window"]],
        "messages_before": view.get("messages_before", 0),
        "messages_after": view.get("messages_after", 0),
    }
    if warning:
        payload["warning"] = warning
    return json.dumps(payload, ensure_ascii=False)


async def _existing_session(db: Any, session_id: str) -> dict[str, Any] | None:
    try:
        return await db.get_session(session_id)
    except Exception:
        log.debug("get_session failed for %s", session_id, exc_info=True)
        return None


async def _read(db: Any, session_id: str, profile: str | None) -> str:
    meta = await _existing_session(db, session_id)
    if not meta:
        return _error(f"session_id not found: {session_id}")
    try:
        rows = await db.get_messages(session_id)
    except Exception as exc:
        return _error(f"failed to load session: {exc}")
    shaped = [_shape(m) for m in rows]
    truncated = len(shaped) > READ_HEAD + READ_TAIL
    payload: dict[str, Any] = {
        "success": True,
        "mode": "read",
        "session_id": session_id,
        "link": _link(session_id, profile),
        "session_meta": _meta(meta),
        "message_count": len(shaped),
        "truncated": truncated,
        "messages": shaped[:READ_HEAD] + shaped[-READ_TAIL:] if truncated else shaped,
    }
    if truncated:
        payload["message"] = (
            f"Session has {len(shaped)} messages; showing the first {READ_HEAD} and last {READ_TAIL}. "
            "Pass around_message_id (any id above) to scroll the middle."
        )
    return json.dumps(payload, ensure_ascii=False)


async def _read_any_profile(session_id: str, skip: Path | None) -> str | None:
    """Look for ``session_id`` in every profile's store (read-only); return the read payload or None."""
    for name, path in _all_profile_dbs():
        if not path.exists() or (skip is not None and path.resolve() == skip):
            continue
        other = SessionDB(path, read_only=True)
        try:
            if await other.get_session(session_id):
                found = json.loads(await _read(other, session_id, name))
                if found.get("success"):
                    found["profile"] = name
                    return json.dumps(found, ensure_ascii=False)
        except Exception:
            log.debug("profile scan failed for %s in %s", session_id, name, exc_info=True)
        finally:
            await other.close()
    return None


async def _browse(db: Any, limit: int, current: str | None, profile: str | None) -> str:
    try:
        rows = await db.list_sessions_rich(
            limit=limit + 5, exclude_sources=list(HIDDEN_SOURCES), order_by_last_active=True
        )
    except Exception as exc:
        log.warning("session_search: listing failed: %s", exc)
        return _error(f"Failed to list recent sessions: {exc}")
    current_root = await _lineage_root(db, current) if current else None
    skip = {current, current_root} - {None}
    results = []
    for row in rows:
        session_id = row.get("id")
        if session_id in skip or row.get("_lineage_root_id") in skip or row.get("parent_session_id"):
            continue
        results.append({
            "session_id": session_id,
            "link": _link(session_id, profile),
            "title": row.get("title") or None,
            "source": row.get("source", ""),
            "started_at": row.get("started_at"),
            "last_active": row.get("last_active"),
            "message_count": row.get("message_count", 0),
            "preview": row.get("preview", ""),
        })
        if len(results) >= limit:
            break
    return json.dumps({
        "success": True,
        "mode": "browse",
        "results": results,
        "count": len(results),
        "message": (
            f"Showing the {len(results)} most recently active sessions. Pass query= to search, "
            "or session_id (+ around_message_id) to read."
        ),
    }, ensure_ascii=False)


# --------------------------------------------------------------------------- entry


async def session_search(
    query: str | None = None,
    role_filter: str | None = None,
    limit: Any = 3,
    db: Any = None,
    current_session_id: str | None = None,
    session_id: str | None = None,
    around_message_id: Any = None,
    window: Any = 5,
    sort: str | None = None,
    profile: str | None = None,
) -> str:
    """Run one ``session_search`` call and return its JSON payload (a str).

    ``db`` is the caller's store (never closed here); without one the
    default ``$HERMES_HOME/state.db`` is opened for this call only.
    ``current_session_id`` hides the caller's own live lineage.
    """
    opened: list[SessionDB] = []
    try:
        if isinstance(session_id, str) and "/" in session_id:
            # A pasted "@session:<profile>/<id>" link value (ids never contain "/").
            head, _, tail = session_id.removeprefix("@session:").partition("/")
            if tail:
                session_id = tail
                if head and not (isinstance(profile, str) and profile.strip()):
                    profile = head
        if isinstance(profile, str) and profile.strip():
            try:
                home = profile_home(profile)
            except ValueError as exc:
                return _error(f"profile '{profile}': {exc}")
            if not home.is_dir():
                return _error(f"profile '{profile}': profile does not exist")
            db = SessionDB(home / "state.db", read_only=True)
            opened.append(db)
            current_session_id = None
            profile = profile.strip().lower()
        elif db is None:
            db = SessionDB()
            opened.append(db)
        else:
            profile = None

        sid = session_id.strip() if isinstance(session_id, str) else ""
        if sid and around_message_id is not None:
            return await _scroll(db, sid, around_message_id, window, current_session_id)
        if sid:
            result = await _read(db, sid, profile)
            if json.loads(result).get("success"):
                return result
            db_path = getattr(db, "db_path", None)
            found = await _read_any_profile(sid, Path(db_path).resolve() if db_path else None)
            return found or result

        count = _clamp(limit, 3, 1, 10)
        if not isinstance(query, str) or not query.strip():
            return await _browse(db, count, current_session_id, profile)
        roles = [r.strip() for r in role_filter.split(",") if r.strip()] if isinstance(role_filter, str) else []
        order = sort.strip().lower() if isinstance(sort, str) else None
        return await _discover(
            db, query.strip(), roles or ["user", "assistant"], count,
            order if order in ("newest", "oldest") else None, current_session_id, profile,
        )
    except Exception as exc:
        log.warning("session_search failed: %s", exc, exc_info=True)
        return _error(f"session_search failed: {exc}")
    finally:
        for store in reversed(opened):
            try:
                await store.close()
            except Exception:
                log.debug("closing a session_search store failed", exc_info=True)


_ARGUMENTS = ("query", "role_filter", "limit", "session_id", "around_message_id", "window", "sort", "profile")


async def _handler(arguments: dict[str, Any], context: ToolContext) -> str:
    kwargs = {key: arguments[key] for key in _ARGUMENTS if key in arguments}
    db = await context.session_db()
    return await session_search(**kwargs, db=db, current_session_id=context.session_id)


SESSION_SEARCH_TOOL = Tool(
    name="session_search",
    description=SESSION_SEARCH_SCHEMA["description"],
    parameters=SESSION_SEARCH_SCHEMA["parameters"],
    handler=_handler,
    parallel_safe=True,
    available=check_session_search_requirements,
)
