"""Layout at a desktop and a phone width: no page scrolls sideways, long names are cut with the full value on hover."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from tests.web.support import HOSTILE_ID, LONG_ID, LONG_MODEL, Viewer, open_tab

WIDTHS = [1280, 390]
PAGES = ["", "sessions/deploy", "sessions/reading", "sessions/compacted", "sessions/" + quote(HOSTILE_ID, safe=""),
         "sessions/" + LONG_ID, "search?q=walruses", "search?q=nothing-matches-this", "usage", "?archived=include",
         "sessions/no-such-session", "sessions/long?view=trace", "sessions/long?q=C%23", "sessions/long?page=3"]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_scrolls_sideways(browser: Any, viewer: Viewer, width: int) -> None:
    for tab in open_tab(browser, viewer, viewport={"width": width, "height": 800}):
        for path in PAGES:
            tab.goto(viewer.base + path)
            tab.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
            scroll, inner = tab.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert scroll <= inner, (width, path, scroll, inner)
            box = tab.locator("header .quick-search input").bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= inner, (width, path, box)
            assert box["width"] >= min(150, inner / 3), (width, path, box)


@pytest.mark.parametrize("width", WIDTHS)
def test_long_ids_and_names_are_cut_with_the_full_value_on_hover(browser: Any, viewer: Viewer, width: int) -> None:
    for tab in open_tab(browser, viewer, viewport={"width": width, "height": 800}):
        tab.goto(viewer.base)
        link = tab.locator(f'td.label a[href="/sessions/{LONG_ID}"]')
        assert link.get_attribute("title") == LONG_ID
        assert link.evaluate("e => e.scrollWidth > e.clientWidth")  # cut with an ellipsis
        model = tab.locator(f'td span[title="{LONG_MODEL}"]')
        assert model.evaluate("e => e.scrollWidth > e.clientWidth && e.getBoundingClientRect().width < 300")
        tab.goto(viewer.base + "sessions/" + LONG_ID)
        assert tab.locator(f'dl.facts span[title="{LONG_MODEL}"]').count() == 1
        table = tab.locator("li.msg .md table")
        assert table.evaluate("e => e.scrollWidth > e.clientWidth")  # the wide table scrolls in its own box
