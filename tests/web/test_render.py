"""The viewer's text handling without a browser: invisible characters, markdown safety, highlighting, folds, errors, turns."""

from __future__ import annotations

import json

import pytest

from hermes_state.web.markup import code_html, json_html, markdown_html
from hermes_state.web.outline import is_error
from hermes_state.web.render import Renderer
from hermes_state.web.reveal import reveal
from hermes_state.web.trace import turns
from hermes_state.web.views import CUT_CHARS, content_blocks, message_view


def test_reveal_labels_what_would_hide_or_reorder_text() -> None:
    assert reveal("Open invoice\u202egpj.exe") == "Open invoice\u27e8RLO\u27e9gpj.exe"
    assert reveal("a\u200bb\ufeffc\u2066d\u2069") == "a\u27e8ZWSP\u27e9b\u27e8BOM\u27e9c\u27e8LRI\u27e9d\u27e8PDI\u27e9"
    assert reveal("esc\x1b[31m bell\x07 del\x7f") == "esc\u241b[31m bell\u2407 del\u2421"
    assert reveal("\U000e0068\U000e0069") == "\u27e8tag h\u27e9\u27e8tag i\u27e9"
    kept = "tab\tline\nCR\r \u05e9\u05dc\u05d5\u05dd \U0001f468\u200d\U0001f469 \u0645\u200c \u2764\ufe0f"
    assert reveal(kept) == kept  # real RTL text, emoji joiners, ZWNJ and variation selectors stay


def test_templates_reveal_text_but_keep_form_values_verbatim() -> None:
    env = Renderer().env
    page = env.from_string('<p title="{{ t }}">{{ t }}</p><input value="{{ t|verbatim }}">').render(t="x\u202ey<")
    assert page == '<p title="x\u27e8RLO\u27e9y&lt;">x\u27e8RLO\u27e9y&lt;</p><input value="x\u202ey&lt;">'


@pytest.mark.parametrize("text, banned", [
    ("<script>alert(1)</script>", "<script"),
    ('<img src=x onerror="alert(1)">', "<img"),
    ("[x](javascript:alert(1))", 'href="javascript'),
    ("[x](JaVaScRiPt:alert(1))", "href="),
    ("[x](vbscript:msgbox(1))", "href="),
    ("[x](data:text/html;base64,PHNjcmlwdD4=)", "href="),
    ("![cat](https://images.example.invalid/cat.png)", "<img"),
    ("<a href='https://x.example'>x</a>", "<a "),
    ("```html\n<script>alert(1)</script>\n```", "<script"),
])
def test_markdown_keeps_stored_html_and_unsafe_links_as_text(text: str, banned: str) -> None:
    html = str(markdown_html(text))
    assert banned not in html.lower()


def test_markdown_renders_and_code_is_coloured_and_escaped() -> None:
    html = str(markdown_html("# T\n\n| a |\n|---|\n| 1 |\n\n```python\nx = '<b>'\n```\n[ok](https://a.example/b)"))
    assert "<h1>T</h1>" in html and "<table>" in html and "'&lt;b&gt;'</span>" in html and '<span class="n">x</span>' in html
    assert '<a href="https://a.example/b" rel="noopener noreferrer nofollow">ok</a>' in html
    assert str(code_html("<x>", "no-such-language")) == '<pre class="code hl">&lt;x&gt;</pre>'
    assert str(json_html('{"a": 1}')).endswith("</span></pre>")  # no newline the text did not have


def test_every_role_folds_and_huge_text_is_cut() -> None:
    for role in ("user", "assistant", "tool", "system", "custom"):
        (block,) = content_blocks("word " * 1000, role=role)
        assert block.folded and block.size == 5000 and not block.cut, role
    (huge,) = content_blocks("y" * (CUT_CHARS * 3), role="user")
    assert huge.folded and huge.cut and len(str(huge.html)) < CUT_CHARS + 200
    (whole,) = content_blocks("y" * (CUT_CHARS * 3), role="user", fold=False)
    assert whole.kind == "text" and not whole.folded and len(str(whole.html)) > CUT_CHARS * 3
    (tool_json,) = content_blocks(json.dumps({"ok": True}), role="tool")
    assert tool_json.kind == "json" and tool_json.text == '{\n  "ok": true\n}'
    (short,) = content_blocks("**hi**", role="assistant")
    assert not short.folded and "<strong>hi</strong>" in str(short.html)


@pytest.mark.parametrize("row, failed", [
    ({"role": "tool", "content": "Error: no such file"}, True),
    ({"role": "tool", "content": "Traceback (most recent call last):"}, True),
    ({"role": "tool", "content": '{"error": "boom"}'}, True),
    ({"role": "tool", "content": '{"exit_code": 2, "stdout": ""}'}, True),
    ({"role": "tool", "content": '{"status": 502}'}, True),
    ({"role": "assistant", "content": "x", "finish_reason": "content_filter"}, True),
    ({"role": "tool", "content": '{"error": null, "exit_code": 0, "status": 200}'}, False),
    ({"role": "tool", "content": "no errors found"}, False),
    ({"role": "user", "content": "Error: I typed this"}, False),
])
def test_error_rows(row: dict, failed: bool) -> None:
    assert is_error(row) is failed


def test_turns_nest_results_under_their_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    rows = [
        {"id": 1, "session_id": "s", "role": "user", "content": "go", "timestamp": 100.0},
        {"id": 2, "session_id": "s", "role": "assistant", "content": None, "tool_calls": [call], "timestamp": 101.0,
         "token_count": 7},
        {"id": 3, "session_id": "s", "role": "tool", "content": "Error: denied", "tool_call_id": "c1", "timestamp": 103.5},
        {"id": 4, "session_id": "s", "role": "assistant", "content": "done", "timestamp": 104.0, "token_count": 3},
        {"id": 5, "session_id": "s", "role": "user", "content": "next", "timestamp": 200.0},
    ]
    first, second = turns([message_view(row) for row in rows])
    assert [step.view.id for step in first.steps] == [2, 4]
    result = first.steps[0].results["c1"]
    assert result.view.id == 3 and result.gap == 2.5 and result.view.error
    assert (first.tokens, first.calls, first.errors, first.seconds) == (10, 1, 1, 4.0)
    assert second.start.id == 5 and second.steps == []
