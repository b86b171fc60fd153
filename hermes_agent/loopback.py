"""A tiny OpenAI-compatible chat-completions server on 127.0.0.1, for tests and key-free demos.

It speaks just enough HTTP/1.1 (``POST /v1/chat/completions``, JSON or
server-sent events with a final usage chunk) for the official ``openai`` SDK
to talk to it through :class:`~hermes_agent.OpenAIChatProvider`. Replies come
from a responder callable, so nothing leaves the machine and nothing is paid.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["LoopbackChatServer", "Responder"]

# The responder gets the request body and returns the assistant message fields
# ("content", "tool_calls", "reasoning") plus optional "usage"
# ({"prompt_tokens", "completion_tokens"}); it may be async and may sleep.
Responder = Callable[[dict[str, Any]], dict[str, Any] | Awaitable[dict[str, Any]]]


class LoopbackChatServer:
    """Serve chat completions from ``responder`` on ``127.0.0.1`` (an ephemeral port by default).

    ``base_url`` (``http://127.0.0.1:<port>/v1``) is set once started;
    ``requests`` holds every request body received. Use as ``async with``.
    """

    def __init__(self, responder: Responder, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._responder = responder
        self._host = host
        self._port = port
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""

    async def __aenter__(self) -> LoopbackChatServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> str:
        """Start listening and return ``base_url``."""
        self._server = await asyncio.start_server(self._on_connection, self._host, self._port)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://{self._host}:{port}/v1"
        return self.base_url

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        request_line = await reader.readline()
        if not request_line:
            return False
        method, path, _ = request_line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                break
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await _send(writer, 404, "application/json", b'{"error": {"message": "not found"}}')
            return True
        request = json.loads(body or b"{}")
        self.requests.append(request)
        reply = self._responder(request)
        if inspect.isawaitable(reply):
            reply = await reply
        if request.get("stream"):
            await self._send_stream(writer, request, reply)
            return False
        await _send(writer, 200, "application/json", json.dumps(_completion(request, reply)).encode())
        return headers.get("connection", "").lower() != "close"

    async def _send_stream(self, writer: asyncio.StreamWriter, request: dict[str, Any], reply: dict[str, Any]) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": request.get("model", "")}

        async def event(payload: Any) -> None:
            data = f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        await event(chunk({"role": "assistant", "content": ""}))
        if reply.get("reasoning"):
            await event(chunk({"reasoning_content": reply["reasoning"]}))
        content = reply.get("content") or ""
        for start in range(0, len(content), 8):
            await event(chunk({"content": content[start:start + 8]}))
        for index, call in enumerate(reply.get("tool_calls") or []):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            await event(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                               "function": {"name": call["function"]["name"],
                                                            "arguments": arguments[:half]}}]}))
            await event(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}))
        await event(chunk({}, "tool_calls" if reply.get("tool_calls") else "stop"))
        if (request.get("stream_options") or {}).get("include_usage"):
            await event({**base, "choices": [], "usage": _usage(reply)})
        await event("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def _usage(reply: dict[str, Any]) -> dict[str, int]:
    usage = reply.get("usage") or {}
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _completion(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if reply.get("tool_calls"):
        message["tool_calls"] = reply["tool_calls"]
    if reply.get("reasoning"):
        message["reasoning_content"] = reply["reasoning"]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", ""),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}],
        "usage": _usage(reply),
    }


async def _send(writer: asyncio.StreamWriter, status: int, content_type: str, body: bytes) -> None:
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
