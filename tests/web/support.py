"""The viewer's test rig: a seeded store per backend, ``hermes-state serve`` as a real process, the hostile strings.

Stores are seeded through the public API (``seed``); the viewer runs as the
command a user types (``python -m hermes_state --db ... serve --port 0``),
read from the URL line it prints, and is stopped with a signal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from tests.cli_support import cli_env

# Each one must show as text on every page and never become an element or run.
HOSTILE = {
    "script": "<script>window.__pwned = 1; document.title = 'pwned'; document.cookie = 'stolen=1'</script>",
    "img": '<img src=x onerror="window.__pwned = 2">',
    "js_link": '<a href="javascript:window.__pwned = 3">click me</a> [also](javascript:window.__pwned=3)',
    "markdown": "**<svg onload=\"window.__pwned = 4\"></svg>** `<b>bold</b>` <!-- <script>window.__pwned = 5</script> -->",
    "long_line": "WIDE" * 20000,
    "bidi": "\u202eevil reversed\u202c \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "zero_width": "zero\u200bwidth\u200djoin\ufeffbom",
    "surrogate": "lone \ud800 surrogate",
    "style": '<style>body { display: none }</style><iframe src="https://frame.example.invalid/"></iframe>',
}
HOSTILE_ID = '"><img src=x onerror="window.__pwned=6">'
URL_ID = "dir/sub?x=1&y=2#frag %2F .."
# A 1x1 PNG: the one image a transcript may show (a data: URL).
PIXEL = "data:image/png;base64," + base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a0b6b7e90000000049454e44ae426082"
    )
).decode()
REMOTE_IMAGE = "https://images.example.invalid/cat.png"
LONG_RESULT = "\n".join(f"line {n}: " + "x" * 60 for n in range(400))
MARKDOWN = (
    "## Plan\n\n**bold** and `inline code`\n\n| column a | column b |\n|---|---|\n| 1 | 2 |\n\n"
    "```python\ndef answer():\n    return '<b>not bold</b>'\n```\n\n"
    "[docs](https://docs.example.invalid/x) [bad](javascript:alert(1)) <b>raw html</b>"
)
LONG_ID = "session-" + "0123456789abcdef" * 8
LONG_MODEL = "provider/" + "very-long-model-name-" * 9 + "v1"
PASTED = "Try C# and c++ at https://docs.docker.com/compose/ in /srv/app when status=502"
BIG_OUTPUT = "\n".join(f"log {n:04d} " + ("z" * 40 if n != 300 else "the kingfisher line") for n in range(1100))
LONG_TURNS = 50  # five rows each: 250 rows, three pages


def long_session_rows(start: float) -> list[dict[str, Any]]:
    """Turns of a question, a tool call, its result (every seventh fails), an answer and a thanks; 1.5 s apart."""
    rows: list[dict[str, Any]] = []
    for k in range(LONG_TURNS):
        call = {"id": f"call_{k}", "type": "function", "function": {"name": f"grep_{k % 3}", "arguments": json.dumps({"n": k})}}
        result = "Error: no such file or directory" if k % 7 == 3 else (BIG_OUTPUT if k == 12 else f"found {k}")
        rows += [
            {"role": "user", "content": PASTED if k == 20 else f"question {k}"},
            {"role": "assistant", "content": None, "tool_calls": [call], "token_count": 40},
            {"role": "tool", "content": result, "tool_call_id": call["id"], "tool_name": call["function"]["name"]},
            {"role": "assistant", "content": f"answer {k}", "token_count": 60},
            {"role": "user", "content": f"thanks {k}"},
        ]
    for n, row in enumerate(rows):
        row["timestamp"] = start + 1.5 * n
    return rows


# A 2 MB paste: 40,000 lines of 50 characters.
PASTE = "\n".join(f"paste line {n:05d} " + "y" * 33 for n in range(40_000))


@dataclass
class Seeded:
    """What ``seed`` wrote, for the assertions."""

    ids: dict[str, str] = field(default_factory=dict)
    message_ids: dict[str, int] = field(default_factory=dict)


async def seed(db: Any) -> Seeded:
    """Sessions covering what the pages show: tool calls and results, reasoning, images, compaction, lineage, usage, hostile text."""
    out = Seeded()
    await db.create_session("deploy", "cli", model="gpt-test", system_prompt="be brief")
    await db.set_session_title("deploy", "Compose outage")
    await db.append_message("deploy", "user", "Why did the docker compose deployment fail?")
    await db.append_message(
        "deploy", "assistant", None, reasoning="The logs will say which volume is missing.",
        tool_calls=[{"id": "call_1", "type": "function",
                     "function": {"name": "terminal", "arguments": json.dumps({"command": "docker compose logs", "tail": 50})}}],
    )
    out.message_ids["long_result"] = await db.append_message(
        "deploy", "tool", LONG_RESULT, tool_call_id="call_1", tool_name="terminal")
    await db.append_message("deploy", "user", [{"type": "text", "text": "and this screenshot?"},
                                               {"type": "image_url", "image_url": {"url": PIXEL}},
                                               {"type": "image_url", "image_url": {"url": REMOTE_IMAGE}}])
    out.message_ids["answer"] = await db.append_message(
        "deploy", "assistant", "The compose file references a missing volume named zebrafish.")
    await db.update_token_counts("deploy", input_tokens=1500, output_tokens=420, model="gpt-test",
                                 estimated_cost_usd=0.0123, api_call_count=3, billing_provider="acme")
    await db.record_auxiliary_usage("deploy", "title", model="tiny-model", input_tokens=40, estimated_cost_usd=0.0001)

    # A compacted session: archived originals, then the summary and later turns.
    await db.create_session("compacted", "telegram", model="gpt-test")
    for n in range(3):
        await db.append_message("compacted", "user", f"original question {n} about walruses")
        await db.append_message("compacted", "assistant", f"original answer {n}")
    await db.archive_and_compact("compacted", [{"role": "user", "content": "summary of the walrus talk"}])
    await db.append_message("compacted", "assistant", "after the compaction")

    # Lineage: a parent whose compression continued in a child, and a /branch fork.
    await db.create_session("parent", "cli", model="gpt-test")
    await db.append_message("parent", "user", "long conversation start")
    await db.create_session("fork", "cli", parent_session_id="parent", model_config={"_branched_from": "parent"})
    await db.append_message("fork", "user", "a different direction")
    assert await db.try_acquire_compression_lock("parent", "seed")
    await db.publish_compression_child(
        parent_session_id="parent", child_session_id="parent-2", source="cli",
        messages=[{"role": "user", "content": "continued after compression"}], compression_lock_holder="seed",
    )

    # Markdown, a 2 MB paste, JSON tool output and a long reply.
    await db.create_session("reading", "cli", model="gpt-test")
    out.message_ids["markdown"] = await db.append_message("reading", "user", MARKDOWN)
    out.message_ids["paste"] = await db.append_message("reading", "user", PASTE)
    await db.append_message("reading", "tool", json.dumps({"status": 502, "ok": False, "body": "bad gateway"}),
                            tool_name="http", tool_call_id="call_http")
    out.message_ids["long_reply"] = await db.append_message("reading", "assistant", "A long answer. " * 300)

    # Three pages of turns with tool calls, errors and a big folded tool output.
    await db.create_session("long", "cli", model="gpt-test")
    await db.set_session_title("long", "A long debugging session")
    await db.append_messages_batch("long", long_session_rows(time.time() - 3600))
    await db.update_token_counts("long", input_tokens=9000, output_tokens=1000, model="gpt-test", estimated_cost_usd=0.3)

    # A long id and a 200-character model name: truncated on the page, never widening it.
    await db.create_session(LONG_ID, "a-source-name-that-goes-on-and-on-and-on", model=LONG_MODEL)
    await db.append_message(LONG_ID, "user", "| " + " | ".join(f"col{n}" for n in range(40)) + " |\n|"
                            + "---|" * 40 + "\n| " + " | ".join("value-of-a-wide-table-cell" for _ in range(40)) + " |")
    await db.update_token_counts(LONG_ID, input_tokens=10, model=LONG_MODEL, estimated_cost_usd=0.001)

    # An id with every character that means something in a URL.
    await db.create_session(URL_ID, "cli")
    await db.append_message(URL_ID, "user", "reachable by its escaped id")

    # Hostile text everywhere the pages print stored values.
    hostile = "\n".join(HOSTILE.values())
    await db.create_session(HOSTILE_ID, HOSTILE["script"], model=HOSTILE["img"])
    await db.set_session_title(HOSTILE_ID, HOSTILE["script"][:90])
    out.message_ids["hostile"] = await db.append_message(HOSTILE_ID, "user", hostile)
    await db.append_message(
        HOSTILE_ID, "assistant", HOSTILE["markdown"], reasoning=HOSTILE["img"],
        tool_calls=[{"id": HOSTILE["img"], "type": "function",
                     "function": {"name": HOSTILE["script"], "arguments": json.dumps({"html": HOSTILE["img"]})}}],
    )
    await db.append_message(HOSTILE_ID, "tool", HOSTILE["js_link"] + "\n" + LONG_RESULT, tool_name=HOSTILE["img"],
                            tool_call_id=HOSTILE["img"])
    await db.append_message(HOSTILE_ID, HOSTILE["style"], HOSTILE["bidi"])
    await db.update_token_counts(HOSTILE_ID, input_tokens=5, model=HOSTILE["markdown"], estimated_cost_usd=0.5)
    out.ids = {name: name for name in ("deploy", "compacted", "parent", "fork", "parent-2")}
    out.ids["hostile"] = HOSTILE_ID
    return out


def run_async(coroutine: Any) -> Any:
    """Run ``coroutine`` to the end on a new event loop in a thread of its own; returns its result.

    Playwright's synchronous API keeps an event loop running in the test
    thread while a browser is open, so ``asyncio.run`` cannot be used there.
    """
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def run_seed(open_store: Any) -> Seeded:
    """Seed a store built by ``open_store()`` on an event loop of its own, then close it."""

    async def go() -> Seeded:
        db = open_store()
        try:
            return await seed(db)
        finally:
            await db.close()

    return run_async(go())


class Viewer:
    """``hermes-state --db DB serve`` in a process of its own; ``url`` is the line it printed."""

    def __init__(self, home: Path, db: str, *extra: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "hermes_state", "--db", db, "serve", "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(home), cwd=str(home),
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            self.process.wait(timeout=30)
            raise AssertionError(f"serve printed no URL (exit {self.process.returncode}): {self.process.stderr.read()}")
        self.url = line
        self.base = line.split("?", 1)[0]
        self.returncode: int | None = None
        self.stderr = ""

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        """One request without following redirects: ``(status, headers, body)``."""
        return request(self.base.rstrip("/") + path, headers=headers)

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.returncode is None:
            self.process.send_signal(signum)
            try:
                _, self.stderr = self.process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                _, self.stderr = self.process.communicate()
            self.returncode = self.process.returncode
        return self.returncode


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """An HTTP request to the local viewer (never another host): ``(status, lower-cased headers, body)``."""
    opener = urllib.request.build_opener(_NoRedirect)
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with opener.open(req, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def wait_for(check: Any, timeout: float = 10.0, every: float = 0.05) -> Any:
    """Poll ``check()`` until it returns something truthy; returns it (AssertionError on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(every)


def chromium_args() -> list[str]:
    """Debian's chromium, headless, with nothing that phones home."""
    return ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
            # Should a page ever reach for another host, it resolves nothing and goes to a closed local port.
            "--dns-prefetch-disable", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            "--proxy-server=http://127.0.0.1:9"]


CHROMIUM = os.environ.get("HERMES_TEST_CHROMIUM", "/usr/bin/chromium")


# The backends a viewer test runs on; PostgreSQL ones carry the ``postgres`` mark (.ci/run's second pass skips them).
BACKEND_PARAMS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass
class SeededStore:
    backend: str
    db: str  # what --db takes
    seeded: Seeded


_ELSEWHERE = """
import asyncio, sys
from tests.web.support import open_target

async def main():
    db = open_target(sys.argv[1])
    try:
{body}
    finally:
        await db.close()

asyncio.run(main())
"""


def write_elsewhere(db: str, home: Path, body: str) -> None:
    """Run ``body`` (statements on ``db``, indented by eight spaces) in another OS process, as another writer would."""
    from tests.cli_support import REPO, cli_env

    done = subprocess.run([sys.executable, "-c", _ELSEWHERE.format(body=body), db], env=cli_env(home), cwd=str(REPO),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def fresh_store(backend: str, directory: Path, setup: Any) -> tuple[str, Any]:
    """``(db, drop)``: an empty store of ``backend``, filled by ``await setup(store)`` and closed again."""
    db, drop = new_store(backend, directory)

    async def start() -> None:
        async with open_target(db) as store:
            await setup(store)

    run_async(start())
    return db, drop


def open_target(db: str) -> Any:
    """A writable store on ``db`` (a path or a postgresql+asyncpg URL)."""
    if db.startswith("postgresql"):
        from hermes_state.postgres import SessionDB as PostgresSessionDB

        return PostgresSessionDB(db)
    return SessionDB(db)


def new_store(backend: str, directory: Path) -> tuple[str, Any]:
    """``(db, drop)``: an empty SQLite path or PostgreSQL schema, and how to remove it afterwards."""
    if backend == "sqlite":
        directory.mkdir(parents=True, exist_ok=True)
        return str(directory / "state.db"), lambda: None
    import uuid

    from tests.postgres_support import admin_connect, server_dsn, store_dsn

    admin = server_dsn()
    name = f"hs_test_{uuid.uuid4().hex}"

    async def run(sql: str) -> None:
        conn = await admin_connect(admin)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    run_async(run(f'CREATE SCHEMA "{name}"'))

    def drop() -> None:
        run_async(run(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))

    return store_dsn(admin, name), drop


def open_tab(browser: Any, viewer: Viewer, **context_options: Any) -> Any:
    """A page in a fresh context that records every request and lets only the viewer's through (a generator)."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    page.requests = []  # type: ignore[attr-defined]
    page.foreign = []  # type: ignore[attr-defined]
    origin = viewer.base.rstrip("/")

    def route(handle: Any) -> None:
        url = handle.request.url
        page.requests.append(url)  # type: ignore[attr-defined]
        if url.startswith(origin + "/") or url == origin or url.startswith("data:"):
            handle.continue_()
        else:
            page.foreign.append(url)  # type: ignore[attr-defined]
            handle.abort()

    context.route("**/*", route)
    try:
        yield page
    finally:
        context.close()
