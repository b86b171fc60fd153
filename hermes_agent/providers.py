"""Model providers: the small protocol the agent loop talks to, and two implementations.

A provider turns one request (the wire messages and the tool schemas) into one
assistant message plus the token usage of that call. The loop never sees HTTP,
SDK objects or streaming: :class:`OpenAIChatProvider` hides them, and
:class:`ScriptedProvider` replaces them with a script for tests and demos.
"""

from __future__ import annotations

import copy
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import (
    Any,
    Literal,
    Protocol,
    Union,
    runtime_checkable,
)

__all__ = [
    "OpenAIChatProvider",
    "Provider",
    "ProviderError",
    "ProviderReply",
    "ProviderRequest",
    "ScriptedProvider",
    "Usage",
    "text_reply",
    "tool_call",
    "tool_calls_reply",
]

Purpose = Literal["turn", "compression"]


class ProviderError(RuntimeError):
    """A provider could not produce a reply (script exhausted, malformed response, ...)."""


@dataclass(frozen=True)
class Usage:
    """Token counts of one provider call; ``input_tokens`` excludes cache reads."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    estimated_cost_usd: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return the counts as a plain dict (the keys ``update_token_counts`` takes)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "estimated_cost_usd": self.estimated_cost_usd,
        }


@dataclass(frozen=True)
class ProviderRequest:
    """What the loop sends: wire messages (system first), tool schemas and the model."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str
    max_tokens: int | None = None
    purpose: Purpose = "turn"


@dataclass(frozen=True)
class ProviderReply:
    """One assistant message (OpenAI shape) and the usage of the call that produced it."""

    message: dict[str, Any]
    usage: Usage | None = None
    finish_reason: str | None = None


@runtime_checkable
class Provider(Protocol):
    """Anything with ``async complete(request) -> ProviderReply``.

    ``name`` and ``base_url`` label the billing route of the recorded usage.
    An optional ``async aclose()`` releases network clients.
    """

    name: str
    base_url: str | None

    async def complete(self, request: ProviderRequest) -> ProviderReply: ...


# ---------------------------------------------------------------------------- helpers


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, *, call_id: str | None = None) -> dict[str, Any]:
    """Return one OpenAI-shaped tool call (``arguments`` is JSON-encoded when it is a dict)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {
        "id": call_id or f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def text_reply(content: str, usage: Usage | None = None, *, reasoning: str | None = None) -> ProviderReply:
    """Return a final text answer."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning"] = reasoning
    return ProviderReply(message=message, usage=usage, finish_reason="stop")


def tool_calls_reply(
    *calls: dict[str, Any], content: str | None = None, usage: Usage | None = None, reasoning: str | None = None
) -> ProviderReply:
    """Return an assistant message that asks for the given tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": list(calls)}
    if reasoning:
        message["reasoning"] = reasoning
    return ProviderReply(message=message, usage=usage, finish_reason="tool_calls")


ScriptStep = Union[
    str,
    dict,
    ProviderReply,
    BaseException,
    Callable[[ProviderRequest], Union["ScriptStep", Awaitable["ScriptStep"]]],
]


def _as_reply(step: Any) -> ProviderReply:
    if isinstance(step, ProviderReply):
        return step
    if isinstance(step, str):
        return text_reply(step)
    if isinstance(step, dict):
        message = {"role": "assistant", **step}
        return ProviderReply(message=message, finish_reason="tool_calls" if message.get("tool_calls") else "stop")
    raise ProviderError(f"scripted step of type {type(step).__name__} is not a reply")


def default_summary(request: ProviderRequest) -> str:
    """A deterministic stand-in summary: how many turns were folded and the first user request."""
    users = [m for m in request.messages if m.get("role") == "user"]
    first = users[0].get("content") if users else ""
    first_text = first if isinstance(first, str) else json.dumps(first)
    return f"{len(request.messages) - 2} earlier messages; the conversation began with: {first_text[:200]}"


class ScriptedProvider:
    """Answers requests from a script, in order; records every request it got.

    A step is a ``str`` (final answer), a ``dict`` (assistant message fields,
    e.g. ``{"tool_calls": [...]}``), a :class:`ProviderReply`, an exception
    instance (raised), or a callable taking the :class:`ProviderRequest` and
    returning (or awaiting to) any of those. Compression requests are answered
    by ``summarizer`` (a str or callable) without consuming the script.
    """

    def __init__(
        self,
        script: Iterable[ScriptStep] = (),
        *,
        name: str = "scripted",
        base_url: str | None = None,
        usage: Usage | None = None,
        summarizer: str | Callable[[ProviderRequest], str | Awaitable[str]] | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self._script: list[Any] = list(script)
        self._usage = usage
        self._summarizer = summarizer
        self.requests: list[ProviderRequest] = []
        self.closed = False

    def extend(self, steps: Iterable[ScriptStep]) -> None:
        """Append more steps to the script."""
        self._script.extend(steps)

    @property
    def remaining(self) -> int:
        """How many scripted steps are left."""
        return len(self._script)

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        """Return the next scripted reply (or the summary for a compression request)."""
        self.requests.append(copy.deepcopy(request))
        if request.purpose == "compression":
            summary = self._summarizer or default_summary
            text = summary(request) if callable(summary) else summary
            if inspect.isawaitable(text):
                text = await text
            return text_reply(text, self._usage)
        if not self._script:
            raise ProviderError("scripted provider has no reply left")
        step: Any = self._script.pop(0)
        while callable(step) and not isinstance(step, BaseException):
            step = step(request)
            if inspect.isawaitable(step):
                step = await step
        if isinstance(step, BaseException):
            raise step
        reply = _as_reply(step)
        if reply.usage is None and self._usage is not None:
            reply = ProviderReply(message=reply.message, usage=self._usage, finish_reason=reply.finish_reason)
        return reply

    async def aclose(self) -> None:
        """Mark the provider closed (nothing to release)."""
        self.closed = True


# ---------------------------------------------------------------------------- OpenAI


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def usage_from_openai(raw: Any) -> Usage | None:
    """Map a chat-completions ``usage`` object (or dict) to :class:`Usage`; None stays None."""
    if raw is None:
        return None
    prompt = int(_get(raw, "prompt_tokens", 0) or 0)
    completion = int(_get(raw, "completion_tokens", 0) or 0)
    cached = int(_get(_get(raw, "prompt_tokens_details"), "cached_tokens", 0) or 0)
    reasoning = int(_get(_get(raw, "completion_tokens_details"), "reasoning_tokens", 0) or 0)
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=completion,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


class OpenAIChatProvider:
    """Any OpenAI-compatible ``/chat/completions`` endpoint, through the official SDK.

    The ``openai`` package (extra ``hermes-state[openai]``) is imported on the
    first request, not at construction. With ``stream=True`` the reply is read
    as server-sent chunks (content, reasoning and tool-call deltas, and the
    final usage chunk) and assembled into one message. A client passed in is
    borrowed; one the provider built is closed by :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        stream: bool = False,
        name: str = "openai",
        timeout: float = 120.0,
        max_retries: int = 2,
        client: Any = None,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url
        self.stream = bool(stream)
        self._api_key = api_key
        self._timeout = timeout
        self._max_retries = max_retries
        self._client = client
        self._owns_client = client is None
        self._extra_body = dict(extra_body or {})

    def _ensure_client(self) -> Any:
        if self._client is None:
            try:
                from openai import AsyncOpenAI
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise ProviderError(
                    "OpenAIChatProvider needs the openai package: pip install 'hermes-state[openai]'"
                ) from exc
            self._client = AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key or "not-needed",
                timeout=self._timeout,
                max_retries=self._max_retries,
            )
        return self._client

    async def complete(self, request: ProviderRequest) -> ProviderReply:
        """Send one chat-completions request and return the assembled assistant message."""
        client = self._ensure_client()
        kwargs: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.tools:
            kwargs["tools"] = request.tools
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if self._extra_body:
            kwargs["extra_body"] = self._extra_body
        if self.stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
            stream = await client.chat.completions.create(**kwargs)
            return await _collect_stream(stream)
        response = await client.chat.completions.create(**kwargs)
        choices = _get(response, "choices") or []
        if not choices:
            raise ProviderError("chat completion returned no choices")
        choice = choices[0]
        raw = _get(choice, "message")
        message: dict[str, Any] = {"role": "assistant", "content": _get(raw, "content")}
        calls = [
            {
                "id": _get(call, "id"),
                "type": "function",
                "function": {
                    "name": _get(_get(call, "function"), "name"),
                    "arguments": _get(_get(call, "function"), "arguments") or "{}",
                },
            }
            for call in (_get(raw, "tool_calls") or [])
        ]
        if calls:
            message["tool_calls"] = calls
        reasoning = _get(raw, "reasoning_content") or _get(raw, "reasoning")
        if isinstance(reasoning, str) and reasoning:
            message["reasoning"] = reasoning
        return ProviderReply(message=message, usage=usage_from_openai(_get(response, "usage")),
                             finish_reason=_get(choice, "finish_reason"))

    async def aclose(self) -> None:
        """Close the SDK client if this provider created it."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.close()


async def _collect_stream(stream: Any) -> ProviderReply:
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: Usage | None = None
    finish: str | None = None
    try:
        async for chunk in stream:
            if _get(chunk, "usage") is not None:
                usage = usage_from_openai(_get(chunk, "usage"))
            for choice in _get(chunk, "choices") or []:
                delta = _get(choice, "delta")
                finish = _get(choice, "finish_reason") or finish
                if delta is None:
                    continue
                if _get(delta, "content"):
                    content.append(_get(delta, "content"))
                piece = _get(delta, "reasoning_content") or _get(delta, "reasoning")
                if isinstance(piece, str) and piece:
                    reasoning.append(piece)
                for part in _get(delta, "tool_calls") or []:
                    index = _get(part, "index", 0) or 0
                    slot = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                    if _get(part, "id"):
                        slot["id"] = _get(part, "id")
                    fn = _get(part, "function")
                    if _get(fn, "name"):
                        slot["function"]["name"] += _get(fn, "name")
                    if _get(fn, "arguments"):
                        slot["function"]["arguments"] += _get(fn, "arguments")
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
        for call in message["tool_calls"]:
            call["id"] = call["id"] or f"call_{uuid.uuid4().hex[:12]}"
            call["function"]["arguments"] = call["function"]["arguments"] or "{}"
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    return ProviderReply(message=message, usage=usage, finish_reason=finish)
