"""Reading a transcript in the browser: markdown (stored HTML stays text), highlighting, folds, copy and raw JSON."""

from __future__ import annotations

import json
from typing import Any

from tests.web.support import MARKDOWN, PASTE, SeededStore, Viewer, open_tab


def test_markdown_is_rendered_and_stored_html_stays_text(tab: Any, viewer: Viewer, seeded_store: SeededStore) -> None:
    tab.goto(viewer.base + "sessions/reading")
    message = tab.locator(f"#m{seeded_store.seeded.message_ids['markdown']}")
    assert message.locator(".md h2").inner_text() == "Plan"
    assert message.locator(".md strong").inner_text() == "bold"
    assert message.locator(".md table th").all_inner_texts() == ["column a", "column b"]
    code = message.locator("pre.code")
    assert code.inner_text() == "def answer():\n    return '<b>not bold</b>'\n"
    assert code.locator("span.k").first.inner_text() == "def"  # coloured on the server by Pygments
    assert "mono" in code.evaluate("e => getComputedStyle(e).fontFamily").lower()
    assert message.locator("b").count() == 0 and "<b>raw html</b>" in message.inner_text()
    links = message.locator(".md a")
    assert links.count() == 1 and links.first.get_attribute("href") == "https://docs.example.invalid/x"
    assert "noopener" in links.first.get_attribute("rel")
    assert "[bad](javascript:alert(1))" in message.inner_text()
    colour = tab.evaluate("() => getComputedStyle(document.querySelector('pre.code span.k')).color")
    assert colour not in ("rgb(0, 0, 0)", tab.evaluate("() => getComputedStyle(document.body).color"))
    tool = tab.locator("li.role-tool pre.json")
    assert json.loads(tool.inner_text()) == {"status": 502, "ok": False, "body": "bad gateway"}
    assert "mono" in tool.evaluate("e => getComputedStyle(e).fontFamily").lower()


def test_long_messages_of_every_role_fold_and_a_huge_paste_is_cut(tab: Any, viewer: Viewer, seeded_store: SeededStore) -> None:
    ids = seeded_store.seeded.message_ids
    tab.goto(viewer.base + "sessions/reading")
    assert tab.evaluate("() => document.documentElement.scrollHeight") < 8000
    paste = tab.locator(f"#m{ids['paste']}")
    summary = paste.locator("details.show-all > summary")
    assert summary.inner_text() == f"show all ({len(PASTE):,} characters, 40,000 lines)"
    assert paste.locator(".head").inner_text().startswith("paste line 00000 ")
    reply = tab.locator(f"#m{ids['long_reply']}")
    assert reply.locator("details.show-all").count() == 1 and not reply.locator(".fold-box").is_visible()
    summary.click()
    assert paste.locator(".fold-box").is_visible()
    assert tab.evaluate("() => document.documentElement.scrollHeight") < 8000  # the fold scrolls in its own box
    assert len(tab.content()) < 600_000  # the page holds only the first 100,000 characters of 2 MB
    paste.locator("p.cut a").click()
    tab.wait_for_url(lambda url: f"?full={ids['paste']}" in url)
    assert tab.locator("li.msg .content").inner_text().rstrip().endswith("paste line 39999 " + "y" * 33)


def test_copy_buttons_and_raw_json(browser: Any, viewer: Viewer, seeded_store: SeededStore) -> None:
    ids = seeded_store.seeded.message_ids
    for tab in open_tab(browser, viewer, permissions=["clipboard-read", "clipboard-write"]):
        tab.goto(viewer.base + "sessions/reading")
        message = tab.locator(f"#m{ids['markdown']}")
        message.locator("button.copy").click()
        tab.wait_for_function("() => document.querySelector('#m%d button.copy').textContent === 'copied'" % ids["markdown"])
        assert tab.evaluate("() => navigator.clipboard.readText()") == MARKDOWN
        message.locator("button.copy-code").click()
        tab.wait_for_timeout(100)
        assert tab.evaluate("() => navigator.clipboard.readText()") == "def answer():\n    return '<b>not bold</b>'\n"
        message.locator("a.raw").click()
        raw = message.locator("pre.raw-json")
        raw.wait_for()
        row = json.loads(raw.inner_text())
        assert row["id"] == ids["markdown"] and row["content"] == MARKDOWN and row["role"] == "user"
        assert tab.url == viewer.base + "sessions/reading"  # shown in place
        message.locator("a.raw").click()
        assert message.locator("pre.raw-json").count() == 0
