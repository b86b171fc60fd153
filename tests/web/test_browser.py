"""The viewer in a real browser (Debian's headless chromium): every page on both backends, hostile content, no foreign requests."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from tests.web.support import (
    BACKEND_PARAMS,
    HOSTILE,
    HOSTILE_ID,
    PIXEL,
    REMOTE_IMAGE,
    SeededStore,
    Viewer,
    fresh_store,
    open_tab,
    write_elsewhere,
)

# Every tag the templates write; anything else in a page was made from stored content.
TEMPLATE_TAGS = {
    "html", "head", "meta", "title", "link", "script", "body", "header", "a", "nav", "form", "input", "main", "h1",
    "h2", "dl", "div", "dt", "dd", "code", "section", "p", "ol", "ul", "li", "span", "time", "details", "summary",
    "table", "thead", "tbody", "tr", "th", "td", "strong", "footer", "img", "mark", "label", "select", "option",
    "button", "svg", "rect", "line", "text", "figure", "figcaption", "pre",
}
# What the markdown renderer (raw HTML off, images off) may add from a message.
MARKDOWN_TAGS = {"p", "em", "strong", "del", "s", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr", "br", "pre",
                 "code", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td"}

INERT_CHECK = """() => {
  const all = Array.from(document.querySelectorAll('*'));
  return {
    tags: Array.from(new Set(all.map(e => e.localName))),
    handlers: all.filter(e => Array.from(e.attributes).some(a => a.name.startsWith('on'))).map(e => e.outerHTML.slice(0, 80)),
    scripts: Array.from(document.scripts).map(s => s.getAttribute('src')),
    jsLinks: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')).filter(h => /^\\s*javascript:/i.test(h)),
    images: Array.from(document.images).map(i => i.getAttribute('src')),
    styles: Array.from(document.querySelectorAll('style, [style]')).length,
    pwned: window.__pwned === undefined ? null : window.__pwned,
    title: document.title,
    cookie: document.cookie,
  };
}"""


def _inert(tab: Any, title: str) -> dict[str, Any]:
    """Assert that nothing on the page was made from content or ran; returns what was checked."""
    tab.wait_for_timeout(100)  # anything that could run has run
    found = tab.evaluate(INERT_CHECK)
    assert set(found["tags"]) <= TEMPLATE_TAGS | MARKDOWN_TAGS, set(found["tags"]) - TEMPLATE_TAGS - MARKDOWN_TAGS
    assert found["handlers"] == []
    assert found["scripts"] == ["/static/viewer.js"]
    assert found["jsLinks"] == []
    assert all(src.startswith(("data:image/png;", "/")) for src in found["images"]), found["images"]
    assert found["styles"] == 0
    assert found["pwned"] is None
    assert found["title"] == f"{title} · hermes-state"
    assert found["cookie"] == ""
    return found


def _local_only(tab: Any, viewer: Viewer) -> None:
    assert tab.foreign == []
    origin = urlsplit(viewer.base)
    for url in tab.requests:
        assert urlsplit(url).netloc == origin.netloc or url.startswith("data:"), url


def test_sessions_page_lists_and_links(tab: Any, viewer: Viewer, seeded_store: SeededStore) -> None:
    tab.goto(viewer.base)
    rows = tab.locator("table.sessions tbody tr")
    labels = [rows.nth(i).locator("td.label a").inner_text() for i in range(rows.count())]
    assert labels[0] == HOSTILE["script"][:90]  # the newest session first, its hostile title as text
    assert "Compose outage" in labels and "compacted" in labels
    row = rows.filter(has_text="Compose outage")
    assert row.locator("td").nth(1).inner_text() == "cli" and row.locator("td").nth(2).inner_text() == "gpt-test"
    assert row.locator("td").nth(3).inner_text() == "5" and row.locator("td").nth(6).inner_text() == "$0.0123"
    tab.select_option("select[name=source]", "telegram")
    tab.click("button[type=submit]")
    tab.wait_for_url(lambda url: "source=telegram" in url)
    assert tab.locator("table.sessions tbody tr").count() == 1
    tab.goto(viewer.base)
    tab.click("text=Compose outage")
    tab.wait_for_url(viewer.base + "sessions/deploy")
    assert tab.locator("h1").inner_text() == "Compose outage"
    _inert(tab, "Compose outage")
    _local_only(tab, viewer)


def test_transcript_shows_calls_results_reasoning_images_and_usage(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/deploy")
    call = tab.locator(".tool-call").first
    assert call.locator(".fn").inner_text() == "terminal"
    assert call.locator(".json").inner_text() == '{\n  "command": "docker compose logs",\n  "tail": 50\n}'
    result = tab.locator("li.role-tool").first
    assert result.locator(".tool-name").inner_text() == "terminal"
    full = result.locator("details.show-all pre.code")
    assert not full.is_visible() and result.locator(".head").inner_text().startswith("line 0: ")
    result.locator("details.show-all summary").click()
    assert full.is_visible() and full.inner_text().endswith("line 399: " + "x" * 60)
    reasoning = tab.locator("details.reasoning").first
    assert not reasoning.locator(".md").is_visible()
    reasoning.locator("summary").click()
    assert reasoning.locator(".md").inner_text() == "The logs will say which volume is missing."
    image = tab.locator("img.inline-image")
    assert image.count() == 1 and image.get_attribute("src") == PIXEL
    assert tab.evaluate("() => document.querySelector('img.inline-image').naturalWidth") == 1
    assert REMOTE_IMAGE in tab.locator(".remote").inner_text()
    usage = tab.locator("section.usage tbody tr")
    assert usage.count() == 2
    assert usage.nth(0).locator("td").first.inner_text() == "gpt-test"
    assert usage.nth(1).locator("td").nth(1).inner_text() == "title"
    assert "1,500 in" in tab.locator("dl.facts").inner_text()
    _local_only(tab, viewer)


def test_compaction_boundary_and_archived_originals(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/compacted")
    archived = tab.locator("details.archived.compacted")
    assert archived.locator("summary").inner_text() == "6 archived by compaction messages"
    assert not archived.locator("li").first.is_visible()
    archived.locator("summary").click()
    assert archived.locator("li").first.inner_text().count("original question 0 about walruses") == 1
    assert tab.locator(".boundary").count() == 1
    live = tab.locator(".boundary + ol.messages li")
    assert [live.nth(i).locator(".content").inner_text() for i in range(live.count())] == [
        "summary of the walrus talk", "after the compaction"]


def test_a_search_hit_in_archived_history_opens_its_fold(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "search?q=walruses")
    tab.locator("li.hit a.hit-link", has_text="compacted").first.click()
    tab.wait_for_url(lambda url: "/sessions/compacted?at=" in url)
    target = tab.locator("#" + urlsplit(tab.url).fragment)
    assert target.is_visible() and "walruses" in target.inner_text()
    assert tab.evaluate("() => document.querySelector(':target').closest('details').open") is True


def test_lineage_links_both_ways(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/parent")
    children = tab.locator("ul.children li")
    assert [children.nth(i).locator(".relation").inner_text() for i in range(children.count())] == ["branch", "compression"]
    assert tab.locator("ol.chain li").count() == 2
    children.filter(has_text="compression").locator("a").click()
    tab.wait_for_url(viewer.base + "sessions/parent-2")
    tab.click("section.lineage p >> text=parent")
    tab.wait_for_url(viewer.base + "sessions/parent")


def test_search_highlights_and_lands_on_the_message(tab: Any, viewer: Viewer, seeded_store: SeededStore) -> None:
    tab.goto(viewer.base + "search?q=zebrafish")
    hits = tab.locator("li.hit")
    assert hits.count() == 1
    assert [m.inner_text() for m in hits.first.locator("mark").all()] == ["zebrafish"]
    message_id = seeded_store.seeded.message_ids["answer"]
    hits.first.locator("a.hit-link").click()
    tab.wait_for_url(lambda url: url == f"{viewer.base}sessions/deploy?at={message_id}&hl=zebrafish#m{message_id}")
    target = tab.locator(f"#m{message_id}")
    assert target.is_visible() and "zebrafish" in target.inner_text()
    assert tab.evaluate("() => document.querySelector(':target').id") == f"m{message_id}"
    _local_only(tab, viewer)


def test_usage_page_draws_the_chart_from_the_package(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "usage")
    assert tab.locator("figure.chart svg rect").count() >= 3
    legend = [item.inner_text() for item in tab.locator("ul.legend li").all()]
    assert "gpt-test" in legend and "tiny-model" in legend and HOSTILE["markdown"] in legend
    models = [row.locator("td").first.inner_text() for row in tab.locator("table.usage-table").first.locator("tbody tr").all()]
    assert models[0] == HOSTILE["markdown"]  # the costliest model first, its hostile name as text
    tab.select_option("select[name=metric]", "tokens")
    tab.click("button[type=submit]")
    tab.wait_for_url(lambda url: "metric=tokens" in url)
    assert tab.locator("figure.chart svg rect").count() >= 3
    _inert(tab, "Usage")
    _local_only(tab, viewer)


def test_hostile_content_stays_text_everywhere(tab: Any, viewer: Viewer) -> None:
    hostile_page = viewer.base + "sessions/" + quote(HOSTILE_ID, safe="")
    for url, title in ((viewer.base, "Sessions"), (hostile_page, HOSTILE["script"][:90]), (viewer.base + "usage", "Usage"),
                       (viewer.base + "search?q=pwned", "Search"), (viewer.base + "search?q=onerror", "Search")):
        tab.goto(url)
        _inert(tab, title)
    tab.goto(hostile_page)
    assert tab.locator("h1").inner_text() == HOSTILE["script"][:90]
    tab.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    body = tab.locator("section.transcript").inner_text()
    # Markdown is rendered, the HTML inside it stays text.
    assert '<svg onload="window.__pwned = 4"></svg>' in body and "<b>bold</b>" in body
    assert "<!-- <script>window.__pwned = 5</script> -->" in body
    for name in ("script", "img", "js_link", "style"):
        assert HOSTILE[name] in body, name
    # Direction overrides and invisible characters are shown as labels, never applied.
    assert "\u27e8RLO\u27e9evil reversed\u27e8PDF\u27e9 \u05e9\u05dc\u05d5\u05dd" in body
    assert "zero\u27e8ZWSP\u27e9width\u200djoin\u27e8BOM\u27e9bom" in body
    assert not set("\u202e\u202c\u200b\ufeff") & set(tab.content())
    assert "lone \ufffd surrogate" in body
    assert HOSTILE["long_line"] in body
    width = tab.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1  # a 80,000-character line wraps instead of widening the page
    call = tab.locator(".tool-call").first
    assert call.locator(".fn").inner_text() == HOSTILE["script"]
    assert call.locator(".json").inner_text() == json.dumps({"html": HOSTILE["img"]}, indent=2)
    assert tab.locator("li.role-other .role").inner_text() == HOSTILE["style"]
    assert tab.locator("dl.facts").inner_text().count(HOSTILE["img"]) == 1  # the model name
    _local_only(tab, viewer)


def test_pages_work_without_javascript(browser: Any, viewer: Viewer) -> None:
    for tab in open_tab(browser, viewer, java_script_enabled=False):
        tab.goto(viewer.base)
        tab.click("text=Compose outage")
        tab.wait_for_url(lambda url: "/sessions/deploy" in url)
        assert tab.locator("li.msg").count() == 5
        tab.locator("li.role-tool details.show-all summary").click()
        assert tab.locator("li.role-tool details.show-all pre.code").is_visible()
        tab.fill("header input[name=q]", "walruses")
        tab.press("header input[name=q]", "Enter")
        tab.wait_for_url(lambda url: re.search(r"/search\?q=walruses$", url) is not None)
        assert tab.locator("li.hit").count() >= 1
        tab.click("nav >> text=Usage")
        tab.wait_for_url(lambda url: url.endswith("/usage"))
        assert tab.locator("figure.chart svg rect").count() >= 3
        _local_only(tab, viewer)


WRITER = """\
        for n in range(3):
            await db.append_message("live", "assistant", f"appended by another process {n}")"""


async def _watched(store: Any) -> None:
    await store.create_session("live", "cli")
    await store.append_message("live", "user", "watch this")


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_live_tail_shows_what_another_process_writes(browser: Any, web_home: Path, tmp_path: Path, backend: str) -> None:
    db, drop = fresh_store(backend, tmp_path / "live", _watched)
    try:
        if backend == "sqlite":
            assert sorted(p.name for p in (tmp_path / "live").iterdir()) == ["state.db"]  # no -wal when the viewer opens it
        viewer = Viewer(web_home, db)
        try:
            for tab in open_tab(browser, viewer):
                tab.goto(viewer.base + "sessions/live")
                assert tab.locator("li.msg").count() == 1
                tab.wait_for_function("() => document.getElementById('live-status').textContent.startsWith('Live')")
                write_elsewhere(db, web_home, WRITER)
                written = time.monotonic()
                tab.wait_for_function("() => document.querySelectorAll('#tail li.msg').length === 3", timeout=2000)
                assert time.monotonic() - written < 2.0
                texts = [item.inner_text() for item in tab.locator("#tail li.msg .content").all()]
                assert texts == [f"appended by another process {n}" for n in range(3)]
                tab.wait_for_timeout(1500)  # later polls add nothing twice
                assert tab.locator("li.msg").count() == 4
                _local_only(tab, viewer)
        finally:
            assert viewer.stop() == 0
        if backend == "sqlite":
            assert sorted(p.name for p in (tmp_path / "live").iterdir()) == ["state.db"]
    finally:
        drop()


def test_token_rule_in_the_browser(browser: Any, seeded_store: SeededStore, web_home: Path) -> None:
    viewer = Viewer(web_home, seeded_store.db, "--host", "0.0.0.0")
    try:
        port = urlsplit(viewer.base).port
        local = SimpleNamespace(base=f"http://127.0.0.1:{port}/")
        token = viewer.url.split("?token=", 1)[1]
        for tab in open_tab(browser, local):
            assert tab.goto(local.base).status == 401
            assert tab.goto(local.base + "?token=not-the-token").status == 403
            response = tab.goto(local.base + "search?q=zebrafish&token=" + token)
            assert response.status == 200 and tab.url == local.base + "search?q=zebrafish"
            assert tab.locator("li.hit mark").inner_text() == "zebrafish"
            cookies = tab.context.cookies()
            assert [(c["name"], c["value"], c["httpOnly"]) for c in cookies] == [(f"hermes_state_token_{port}", token, True)]
            tab.click("nav >> text=Sessions")
            tab.wait_for_url(local.base)
            assert tab.locator("table.sessions tbody tr").count() >= 5
            _inert(tab, "Sessions")  # the token cookie is out of the page's reach
            _local_only(tab, local)
    finally:
        assert viewer.stop() == 0
