"""Make the viewer's screenshots in docs/: a demo store, ``hermes-state serve`` on it, headless chromium.

Run from the repository root (needs the dev extras and Debian's chromium)::

    python3 docs/screenshots.py

It writes docs/viewer-sessions.png, viewer-transcript.png, viewer-trace.png,
viewer-search.png and viewer-usage.png at 1280 px wide, and the same pages at
390 px (a phone) as viewer-*-390.png. The demo store lives in a temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hermes_state import SessionDB  # noqa: E402

DOCS = REPO / "docs"
DAY = 86400.0

TOPICS = [
    ("Compose outage", "cli", "gpt-4.1", "Why did the docker compose deployment fail last night?"),
    ("Flaky CI on main", "cli", "claude-sonnet", "The integration tests time out about one run in five. Where do I start?"),
    ("Trip to Lisbon", "telegram", "gpt-4.1-mini", "Plan three days in Lisbon with a day trip to Sintra."),
    ("Invoice parser", "api", "gpt-4.1", "Extract the totals from these supplier invoices."),
    ("Postgres vacuum", "cli", "claude-sonnet", "Autovacuum cannot keep up with the events table."),
    ("Weekly report", "slack", "gpt-4.1-mini", "Summarise what the team shipped this week."),
]


def _turns(question: str, n: int) -> list[dict[str, object]]:
    call = {"id": f"call_{n}", "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"command": "docker compose logs --tail 50 api"})}}
    log = "\n".join(f"api-1  | 2026-11-2{n % 10}T03:1{k}:00Z level=error msg=\"volume data not found\" attempt={k}"
                    for k in range(60))
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call],
         "reasoning": "The deploy log will show which service failed first."},
        {"role": "tool", "content": log, "tool_call_id": call["id"], "tool_name": "terminal"},
        {"role": "assistant", "content": "The api service cannot start: the compose file mounts a volume named "
                                         "`data` that was removed in the last cleanup. Recreate it with "
                                         "`docker volume create data`, then run `docker compose up -d api`."},
        {"role": "user", "content": "Done, it is up again. Can we stop this from happening?"},
        {"role": "assistant", "content": "Mark the volume as **external** in `compose.yaml` so a cleanup never "
                                         "removes it, and add a health check that fails the deploy when the mount "
                                         "is missing:\n\n```yaml\nvolumes:\n  data:\n    external: true\n"
                                         "services:\n  api:\n    healthcheck:\n      test: [\"CMD\", \"test\", "
                                         "\"-d\", \"/data\"]\n```"},
    ]


async def demo(path: Path) -> None:
    now = time.time()
    sessions = []
    for n in range(18):
        title, source, model, question = TOPICS[n % len(TOPICS)]
        sessions.append({"id": f"2026112{n % 10}_{1000 + n}", "source": source, "model": model,
                         "title": title if n < len(TOPICS) else f"{title} #{n // len(TOPICS) + 1}",
                         "started_at": now - (17 - n) * DAY * 0.8 - 3600, "messages": _turns(question, n)})
        for k, message in enumerate(sessions[-1]["messages"]):  # a few seconds per step, as in a real run
            message["timestamp"] = sessions[-1]["started_at"] + 4.5 * k + (2.0 if message["role"] == "tool" else 0.0)
    async with SessionDB(path) as db:
        await db.import_sessions(sessions)
        for n, session in enumerate(sessions):
            await db.update_token_counts(session["id"], input_tokens=12000 + 3000 * (n % 5), output_tokens=900 + 150 * n,
                                         model=session["model"], estimated_cost_usd=0.02 + 0.011 * (n % 7),
                                         api_call_count=3 + n % 4, billing_provider="demo")
            await db.record_auxiliary_usage(session["id"], "title", model="gpt-4.1-nano", input_tokens=300,
                                            estimated_cost_usd=0.0004)
        await db.set_session_pinned(sessions[-1]["id"], True)
        await db.archive_and_compact(sessions[-2]["id"], [
            {"role": "user", "content": "Summary of the earlier conversation: the api container failed because its "
                                        "data volume was removed; it was recreated and the service is back."}])
        await db.append_message(sessions[-2]["id"], "user", "Thanks. What else should the runbook say?")


def main() -> int:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        asyncio.run(demo(db))
        viewer = subprocess.Popen([sys.executable, "-m", "hermes_state", "--db", str(db), "serve", "--port", "0"],
                                  stdout=subprocess.PIPE, text=True, cwd=str(REPO))
        assert viewer.stdout is not None
        base = viewer.stdout.readline().strip()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path="/usr/bin/chromium", headless=True,
                    args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync"])
                shots = [("viewer-sessions", ""), ("viewer-transcript", "sessions/20261120_1000"),
                         ("viewer-trace", "sessions/20261120_1000?view=trace"),
                         ("viewer-search", "search?q=volume"), ("viewer-usage", "usage")]
                for width, suffix in ((1280, ""), (390, "-390")):
                    page = browser.new_page(viewport={"width": width, "height": 860 if width > 400 else 844})
                    for name, path in shots:
                        page.goto(base + path)
                        if name == "viewer-transcript":
                            page.locator("details.reasoning summary").first.click()
                        if name == "viewer-trace":
                            page.evaluate("() => document.querySelector('ol.trace').scrollIntoView()")
                        target = DOCS / f"{name}{suffix}.png"
                        page.screenshot(path=str(target), full_page=False)
                        print(target)
                    page.close()
                browser.close()
        finally:
            viewer.terminate()
            viewer.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
