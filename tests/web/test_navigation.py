"""Finding one's way in the browser: page N of M, jump to message N, outline, find in session, search landings, trace, live changes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.web.support import BACKEND_PARAMS, PASTED, Viewer, fresh_store, open_tab, write_elsewhere


def test_page_n_of_m_first_last_and_the_tab_title(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/long")
    assert tab.title() == "A long debugging session · hermes-state"
    where = tab.locator("nav.pager .where").first
    assert where.inner_text() == "page 1 of 3 · messages 1–100 of 250"
    assert tab.locator("nav.pager a.first").count() == 0
    tab.locator("nav.pager a.last").first.click()
    tab.wait_for_url(lambda url: url.endswith("?page=3"))
    assert where.inner_text() == "page 3 of 3 · messages 201–250 of 250"
    assert tab.locator("section.transcript > ol.messages > li.msg").count() == 50
    assert tab.locator("li.msg .content").last.inner_text() == "thanks 49"
    tab.locator("nav.pager a[rel=prev]").first.click()
    tab.wait_for_url(lambda url: url.endswith("?page=2"))
    tab.locator("nav.pager a.first").first.click()
    tab.wait_for_url(lambda url: url.endswith("?page=1"))
    assert tab.locator("li.msg .content").first.inner_text() == "question 0"
    assert viewer.get("/sessions/long?page=99")[0] == 200  # past the end: the last page


def test_jump_to_message_n(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/long")
    tab.locator("form.jump input[name=n]").first.fill("151")
    tab.locator("form.jump button").first.click()
    tab.wait_for_url(lambda url: re.search(r"\?page=2#m\d+$", url) is not None)
    target = tab.locator(":target")
    assert target.locator(".content").inner_text() == "question 30"  # the 151st row opens turn 30
    assert target.is_visible()
    status, headers, _ = viewer.get("/sessions/long?n=999")
    assert status == 303 and headers["location"].startswith("/sessions/long?page=3#m")
    # A link to a message (search hits use it) opens the numbered page that holds it.
    rows = json.loads(viewer.get("/api/sessions/long")[2])["messages"]
    for ordinal, content, where in ((230, "thanks 45", "page 3 of 3"), (101, PASTED, "page 2 of 3"),
                                    (1, "question 0", "page 1 of 3")):
        row = rows[ordinal - 1]
        assert row["content"] == content
        tab.goto(f"{viewer.base}sessions/long?at={row['id']}#m{row['id']}")
        assert tab.locator("nav.pager .where").first.inner_text().startswith(where)
        assert tab.locator(":target .content").inner_text() == content


def test_outline_lists_the_pages_tool_calls_and_errors(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/long")
    outline = tab.locator("details.outline")
    assert outline.locator("summary").inner_text() == "Outline of this page: 20 tool calls, 3 errors"
    errors = outline.locator("li.error")
    failed = [errors.nth(i).inner_text().split(" ", 1)[1] for i in range(errors.count())]
    assert failed == ["grep_0 failed", "grep_1 failed", "grep_2 failed"]
    errors.first.locator("a").click()
    target = tab.locator(":target")
    assert target.get_attribute("class").split().count("error") == 1
    assert "Error: no such file or directory" in target.inner_text()


def test_find_in_session_finds_what_was_pasted(tab: Any, viewer: Viewer) -> None:
    for query in ("C#", "c++", "https://docs.docker.com/compose/", "/srv/app", "status=502"):
        tab.goto(viewer.base + "sessions/long?" + "q=" + query.replace("#", "%23").replace("+", "%2B"))
        hits = tab.locator("ol.in-session-hits li.hit")
        assert hits.count() == 1, query
        assert hits.first.locator("mark").inner_text().lower() == query.lower()
    hits.first.locator("a").click()
    tab.wait_for_url(lambda url: "hl=" in url)
    target = tab.locator(":target")
    assert target.locator(".content").inner_text() == PASTED
    assert target.locator("mark.landed").inner_text() == "status=502"


def test_a_search_hit_in_a_folded_output_opens_the_fold_and_marks_it(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "search?q=kingfisher")
    assert tab.locator("p.hit-count").inner_text() == "1 match"
    tab.locator("li.hit a.hit-link").first.click()
    tab.wait_for_url(lambda url: "/sessions/long?at=" in url and "hl=kingfisher" in url)
    mark = tab.locator(":target mark.landed")
    assert mark.inner_text() == "kingfisher"
    assert mark.is_visible() and tab.locator(":target details.show-all").get_attribute("open") is not None
    box, viewport = mark.bounding_box(), tab.viewport_size
    assert box is not None and 0 <= box["y"] <= viewport["height"]  # scrolled to the mark
    tab.goto(viewer.base + "search?q=question")
    assert tab.locator("p.hit-count").inner_text() == "Matches 1–20 of 52"  # 49 "question N" turns, 3 compacted ones
    assert tab.locator("nav.pager .where").inner_text() == "page 1 of 3"


def test_trace_nests_results_under_calls_with_times_tokens_and_cost(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/long?view=trace")
    turns = tab.locator("li.turn")
    assert turns.count() == 40  # 100 rows: 20 turns of a question and 20 of a thanks
    first = turns.first
    head = first.locator(".turn-head").inner_text()
    assert "1 tool call" in head and "100 tokens" in head and "4.5 s" in head and "≈$0.0" in head
    call = first.locator("li.call")
    assert call.locator(".fn").inner_text() == "grep_0"
    result = call.locator(".result")
    assert "result +1.5 s" in result.inner_text() and "found 0" in result.inner_text()
    failing = turns.nth(6).locator("li.call .result.error")  # turn k=3: the question opens the 7th turn
    assert failing.count() == 1 and "Error: no such file" in failing.inner_text()
    result.locator("a").click()
    tab.wait_for_url(lambda url: "#m" in url and "view=trace" not in url)
    assert tab.locator(":target").get_attribute("class").startswith("msg role-tool")


def test_totals_across_a_compression_chain(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base + "sessions/parent-2")
    totals = tab.locator(".chain-totals dd").inner_text()
    assert totals.startswith("2 sessions · 2 messages")


CHANGE = """\
        await db.archive_and_compact("live", [{"role": "user", "content": "summary written by another process"}])
        await db.append_message("live", "assistant", "after the compaction, live")"""


async def _long_watched(store: Any) -> None:
    await store.create_session("live", "cli")
    await store.set_session_title("live", "Watched")
    await store.append_messages_batch("live", [{"role": "user", "content": f"row {n}"} for n in range(120)])


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_live_compaction_on_every_page(browser: Any, web_home: Path, tmp_path: Path, backend: str) -> None:
    db, drop = fresh_store(backend, tmp_path / "live", _long_watched)
    try:
        viewer = Viewer(web_home, db)
        try:
            for last in open_tab(browser, viewer):
                for first in open_tab(browser, viewer):
                    last.goto(viewer.base + "sessions/live?page=2")
                    first.goto(viewer.base + "sessions/live?page=1")
                    for tab in (last, first):
                        tab.wait_for_function("() => document.getElementById('live-status').textContent.startsWith('Live')")
                    write_elsewhere(db, web_home, CHANGE)
                    # The last page: originals marked archived in place, a boundary, then the summary and the reply.
                    last.wait_for_function("() => document.querySelectorAll('#tail li.msg').length === 2", timeout=5000)
                    assert last.locator("#tail .boundary").count() == 1
                    assert [t.inner_text() for t in last.locator("#tail li.msg .content").all()] == [
                        "summary written by another process", "after the compaction, live"]
                    assert last.locator("li.msg.compacted").count() == 20
                    assert last.locator("li.msg.compacted .flag.state").first.inner_text() == "archived by compaction"
                    # An earlier page: its rows marked too, and a pointer to the new messages.
                    first.wait_for_function("() => document.querySelectorAll('li.msg.compacted').length === 100", timeout=5000)
                    first.wait_for_function("() => /2 new messages/.test(document.getElementById('live-status').textContent)")
                    link = first.locator("#live-status a")
                    assert urlsplit(link.get_attribute("href")).query == "page=2"
                    assert first.locator("#tail li.msg").count() == 0
        finally:
            assert viewer.stop() == 0
    finally:
        drop()


def test_session_list_sorts_filters_and_counts(tab: Any, viewer: Viewer) -> None:
    tab.goto(viewer.base)
    total = int(tab.locator("p.total").inner_text().split()[0])
    assert total == tab.locator("table.sessions tbody tr").count() >= 8
    tab.click("details.more-filters > summary")
    tab.fill("input[name=tool]", "terminal")
    tab.click("form.filters button[type=submit]")
    tab.wait_for_url(lambda url: "tool=terminal" in url)
    assert tab.locator("p.total").inner_text() == "1 session"
    assert tab.locator("td.label a").inner_text() == "Compose outage"
    assert tab.locator("details.more-filters").get_attribute("open") is not None  # a filter in it is set
    tab.goto(viewer.base + "?sort=messages")
    assert tab.locator("td.label a").first.inner_text() == "A long debugging session"
    assert tab.locator("select[name=sort]").input_value() == "messages"
