"""hermes-agent: a compact reference agent loop on top of a hermes-state ``SessionDB``.

``AIAgent`` runs turns against a pluggable :class:`Provider`, persists every
turn into a borrowed (or, for ``session_search``, lazily opened) store by the
storage contract of async-hermes-agent, offers the ``session_search`` recall
tool, compacts long contexts through the store's compression lease, and can
write JSONL trajectories. ``hermes_state`` never imports this package.
"""

from __future__ import annotations

from .agent import (
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TOOLS,
    AIAgent,
    load_resume_history,
    new_session_id,
)
from .providers import (
    OpenAIChatProvider,
    Provider,
    ProviderError,
    ProviderReply,
    ProviderRequest,
    ScriptedProvider,
    Usage,
    text_reply,
    tool_call,
    tool_calls_reply,
)
from .session_search import SESSION_SEARCH_SCHEMA, SESSION_SEARCH_TOOL, session_search
from .tools import Tool, ToolContext, tool

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TOOLS",
    "SESSION_SEARCH_SCHEMA",
    "SESSION_SEARCH_TOOL",
    "AIAgent",
    "OpenAIChatProvider",
    "Provider",
    "ProviderError",
    "ProviderReply",
    "ProviderRequest",
    "ScriptedProvider",
    "Tool",
    "ToolContext",
    "Usage",
    "load_resume_history",
    "new_session_id",
    "session_search",
    "text_reply",
    "tool",
    "tool_call",
    "tool_calls_reply",
]
