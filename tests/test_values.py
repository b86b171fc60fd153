"""Values come back as they went in, or are refused at the call site with an error that names the argument.

Covers issue 10 items 1-4: strings that look like the structured-content
marker, numeric and boolean content, NaN and 64-bit limits, nesting depth,
and token counters at their limit.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_state import SessionDB
from hermes_state.encoding import JSON_CONTENT_PREFIX, decode_content, join_content, split_content
from hermes_state.limits import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH
from tests.raw_sql import fetch_rows



MARKER_STRINGS = [
    "\x00json:[1, 2]",
    '\x00json:{"a": 1}',
    "\x00json:",
    "\x00json:not json at all",
    '\x00json:"\\u0000json:[1]"',
    "\x00json:\x00json:[]",
]


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1, 1.0 and True are three different values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def reference_decode(stored: Any) -> Any:
    """How async-hermes-agent reads the ``content`` column (spec §2.1)."""
    if isinstance(stored, str) and stored.startswith("\x00json:"):
        try:
            return json.loads(stored[len("\x00json:"):])
        except ValueError:
            return stored
    return stored


def raw_contents(db_path: Path, session_id: str) -> list[Any]:
    with sqlite3.connect(db_path) as conn:
        return [r[0] for r in conn.execute("SELECT content FROM messages WHERE session_id = ? ORDER BY id", (session_id,))]


# ------------------------------------------------------------------ item 1


@pytest.mark.parametrize("text", MARKER_STRINGS)
async def test_marker_like_strings_come_back_as_strings(store: SessionDB, text: str) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "tool", text, tool_name="t")
    await store.append_messages_batch("s", [{"role": "tool", "content": text}])
    rows = await store.get_messages("s")
    assert [r["content"] for r in rows] == [text, text]
    conversation = await store.get_messages_as_conversation("s")
    assert [m["content"] for m in conversation] == [text, text]
    exported = await store.export_session("s")
    assert exported is not None and [m["content"] for m in exported["messages"]] == [text, text]


@pytest.mark.parametrize("text", MARKER_STRINGS)
async def test_marker_like_strings_survive_replace_and_import(store: SessionDB, text: str) -> None:
    await store.create_session("s", "cli")
    await store.replace_messages("s", [{"role": "user", "content": text}])
    assert [r["content"] for r in await store.get_messages("s")] == [text]
    exported = json.loads(json.dumps(await store.export_session("s")))
    exported["id"] = "copy"
    result = await store.import_sessions([exported])
    assert result["ok"], result
    assert [r["content"] for r in await store.get_messages("copy")] == [text]


async def test_escaped_strings_read_back_with_the_reference_decoder(db_path: Path) -> None:
    values: list[Any] = [*MARKER_STRINGS, 7, 1.5, True, False, 0, -0.0, [1, "a"], {"k": None}]
    async with SessionDB(db_path) as db:
        await db.create_session("s", "cli")
        for value in values:
            await db.append_message("s", "user", value)
    stored = raw_contents(db_path, "s")
    assert all(isinstance(v, str) and v.startswith(JSON_CONTENT_PREFIX) for v in stored)
    assert all(same(reference_decode(v), expected) for v, expected in zip(stored, values))


async def test_files_written_by_the_reference_read_as_they_meant(db_path: Path) -> None:
    async with SessionDB(db_path) as db:
        await db.create_session("s", "cli")
    # What the reference wrote: markers it produced, a bare int (TEXT affinity
    # made it '7'), a marker followed by broken JSON, and a BLOB.
    written = [
        '\x00json:[{"type": "text", "text": "hi"}]',
        7,
        "\x00json:{broken",
        b"\x00\x01",
    ]
    with sqlite3.connect(db_path) as conn:
        for index, value in enumerate(written):
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s', 'user', ?, ?)",
                (value, 1000.0 + index),
            )
    async with SessionDB(db_path) as db:
        contents = [r["content"] for r in await db.get_messages("s")]
    assert same(contents, [[{"type": "text", "text": "hi"}], "7", "\x00json:{broken", b"\x00\x01"])


async def test_stored_json_too_deep_to_parse_reads_without_recursion_errors(db_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    async with SessionDB(db_path) as db:
        await db.create_session("s", "cli", model_config={"a": 1})
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_calls, reasoning_details, display_metadata, timestamp)"
            " VALUES ('s', 'assistant', ?, ?, ?, ?, 1.0)",
            (JSON_CONTENT_PREFIX + deep, deep, deep, deep),
        )
        conn.execute("UPDATE sessions SET model_config = ? WHERE id = 's'", (deep,))
    async with SessionDB(db_path) as db:
        (row,) = await db.get_messages("s")
        assert (row["content"], row["tool_calls"], row["display_metadata"]) == (JSON_CONTENT_PREFIX + deep, [], None)
        (message,) = await db.get_messages_as_conversation("s")
        assert message["content"] == JSON_CONTENT_PREFIX + deep
        assert await db.patch_session_model_config("s", {"b": 2})
        assert json.loads((await db.get_session("s") or {})["model_config"]) == {"b": 2}
        with pytest.raises(ValueError, match="^model_config_json: nesting is limited to 100 levels"):
            await db.update_session_meta("s", deep)
        with pytest.raises(ValueError, match=r"^model_config_json\['t'\]: numbers must be finite"):
            await db.update_session_meta("s", '{"t": NaN}')
        await db.update_session_meta("s", "not json")  # stored as given, like the reference
        assert (await db.get_session("s") or {})["model_config"] == "not json"


def test_content_kind_split_is_lossless_for_every_stored_form() -> None:
    from hermes_state.encoding import encode_content

    for value in [*MARKER_STRINGS, "plain", "", None, b"\x00json:", 3, 2.5, True, [1], {"a": [None]}]:
        stored = encode_content(value)
        payload, kind = split_content(stored)
        assert kind == (None if value is None else "bytes" if isinstance(value, bytes) else
                        "text" if isinstance(value, str) and not value.startswith(JSON_CONTENT_PREFIX) else "json")
        assert join_content(payload, kind) == stored
        assert same(decode_content(join_content(payload, kind)), value)


# ------------------------------------------------------------------ item 2


SCALARS: list[Any] = [7, 0, -1, 1.5, -0.0, 1e300, True, False, INT64_MAX, INT64_MIN, None, [], {}, ""]


async def test_numeric_and_boolean_content_keeps_its_type(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    for value in SCALARS:
        await store.append_message("s", "tool", value)
    await store.append_messages_batch("s", [{"role": "tool", "content": v} for v in SCALARS])
    contents = [r["content"] for r in await store.get_messages("s")]
    assert same(contents, SCALARS + SCALARS)
    exported = json.loads(json.dumps(await store.export_session("s")))
    exported["id"] = "copy"
    assert (await store.import_sessions([exported]))["ok"]
    assert same([r["content"] for r in await store.get_messages("copy")], SCALARS + SCALARS)


async def test_compaction_writers_keep_content_types(store: SessionDB) -> None:
    values: list[Any] = [7, True, 2.5, "\x00json:[1, 2]", {"a": [1, None]}]
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "old")
    assert await store.archive_and_compact("s", [{"role": "user", "content": v} for v in values]) == len(values)
    assert same([r["content"] for r in await store.get_messages("s")], values)
    assert await store.try_acquire_compression_lock("s", "me")
    await store.publish_compression_child(
        parent_session_id="s", child_session_id="child", source="cli",
        messages=[{"role": "user", "content": v} for v in values], compression_lock_holder="me",
    )
    assert same([r["content"] for r in await store.get_messages("child")], values)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, [1.0, math.nan], {"x": {"y": math.inf}}])
async def test_non_finite_content_is_refused_at_the_call_site(store: SessionDB, bad: Any) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "keep")
    with pytest.raises(ValueError, match=r"content.*finite"):
        await store.append_message("s", "user", bad)
    with pytest.raises(ValueError, match=r"messages\[1\]: content.*finite"):
        await store.append_messages_batch("s", [{"role": "user", "content": "ok"}, {"role": "user", "content": bad}])
    with pytest.raises(ValueError, match=r"messages\[0\]: content.*finite"):
        await store.replace_messages("s", [{"role": "user", "content": bad}])
    assert [r["content"] for r in await store.get_messages("s")] == ["keep"]


@pytest.mark.parametrize(
    ("bad", "error", "pattern"),
    [
        ((1, 2), TypeError, r"content: .*tuple.*use a list"),
        ({1: "a"}, TypeError, r"content: object keys must be strings"),
        ({"a": {1, 2}}, TypeError, r"content\['a'\]: .*set cannot be stored"),
        (object(), TypeError, r"content: .*object cannot be stored"),
    ],
)
async def test_values_json_would_change_are_refused(store: SessionDB, bad: Any, error: type, pattern: str) -> None:
    await store.create_session("s", "cli")
    with pytest.raises(error, match=pattern):
        await store.append_message("s", "user", bad)
    assert await store.get_messages("s") == []


# ------------------------------------------------------------------ item 3


async def test_deep_nesting_is_a_value_error_naming_the_limit(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    deep = nested(1000)
    limit = rf"nesting is limited to {MAX_JSON_DEPTH} levels"
    with pytest.raises(ValueError, match=rf"^content\[0\].*{limit}"):
        await store.append_message("s", "user", deep)
    with pytest.raises(ValueError, match=rf"^tool_calls.*{limit}"):
        await store.append_message("s", "assistant", "x", tool_calls=[{"id": "c", "args": deep}])
    with pytest.raises(ValueError, match=rf"^tool_calls: {limit}"):
        await store.append_message("s", "assistant", "x", tool_calls="[" * 100_000)  # JSON text too deep to parse
    with pytest.raises(ValueError, match=rf"messages\[0\]: tool_calls.*{limit}"):
        await store.append_messages_batch("s", [{"role": "assistant", "tool_calls": [deep]}])
    with pytest.raises(ValueError, match=rf"display_metadata.*{limit}"):
        await store.append_message("s", "user", "x", display_metadata={"a": deep})
    with pytest.raises(ValueError, match=rf"reasoning_details.*{limit}"):
        await store.append_message("s", "assistant", "x", reasoning_details=[deep])
    with pytest.raises(ValueError, match=rf"model_config.*{limit}"):
        await store.create_session("t", "cli", model_config={"a": deep})
    assert await store.get_messages("s") == [] and await store.get_session("t") is None
    # The limit itself is fine, one level deeper is not.
    await store.append_message("s", "user", nested(MAX_JSON_DEPTH))
    assert (await store.get_messages("s"))[0]["content"] == nested(MAX_JSON_DEPTH)
    with pytest.raises(ValueError, match=limit):
        await store.append_message("s", "user", nested(MAX_JSON_DEPTH + 1))


async def test_integers_past_64_bits_are_refused_naming_the_argument(store: SessionDB) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "keep")
    signed = r"signed 64-bit range -2\*\*63 \.\. 2\*\*63 - 1"
    with pytest.raises(ValueError, match=rf"^content: integers must be within the {signed}"):
        await store.append_message("s", "user", 2**63)
    with pytest.raises(ValueError, match=rf"^content\[0\]\['n'\]: integers.*{signed}"):
        await store.append_message("s", "user", [{"n": -(2**63) - 1}])
    with pytest.raises(ValueError, match=rf"^token_count must be an integer within the {signed}"):
        await store.append_message("s", "user", "x", token_count=2**63)
    with pytest.raises(ValueError, match=r"^messages\[0\]: token_count"):
        await store.append_messages_batch("s", [{"role": "user", "content": "x", "token_count": 2**64}])
    with pytest.raises(ValueError, match=r"tool_calls\[0\]\['n'\]"):
        await store.append_message("s", "assistant", "x", tool_calls=[{"n": 10**30}])
    for name in ("limit", "offset", "after_id"):
        with pytest.raises(ValueError, match=rf"^{name} must be an integer within the {signed}"):
            await store.get_messages("s", **{name: 2**63})
    for name in ("limit", "offset"):
        with pytest.raises(ValueError, match=rf"^{name} must be an integer"):
            await store.search_messages("keep", **{name: 2**63})
        with pytest.raises(ValueError, match=rf"^{name} must be an integer"):
            await store.list_sessions_rich(**{name: 2**70})
    with pytest.raises(ValueError, match="^input_tokens must be an integer"):
        await store.queue_token_counts("s", input_tokens=2**63)  # keyword arguments, checked all the same
    with pytest.raises(ValueError, match="^min_messages must be an integer"):
        await store.list_prune_candidates(min_messages=2**63)
    assert [r["content"] for r in await store.get_messages("s")] == ["keep"]
    # The largest values are accepted and simply mean "everything".
    assert len(await store.get_messages("s", limit=INT64_MAX)) == 1
    assert await store.get_messages("s", offset=INT64_MAX) == []
    assert await store.get_messages("s", after_id=INT64_MAX) == []
    assert len(await store.search_messages("keep", limit=INT64_MAX)) == 1
    assert await store.search_messages("keep", limit=INT64_MAX, offset=INT64_MAX) == []
    assert len(await store.list_sessions_rich(limit=INT64_MAX)) == 1
    assert await store.list_sessions_rich(limit=INT64_MAX, offset=INT64_MAX) == []


# Values for the required arguments of every public method, by name.
_REQUIRED: dict[str, Any] = {
    "session_id": "s", "role": "user", "query": "keep", "key": "k", "holder": "h", "task": "t",
    "source": "cli", "messages": [], "sessions": [], "compacted_messages": [], "patch": {"a": 1},
    "parent_session_id": "s", "child_session_id": "c", "content": "keep", "api_content": None,
    "value": None, "around_message_id": 1, "row_id": 1, "cooldown_until": 1.0, "target_message_id": 1,
    "since_message_id": 1, "streak": 0, "count": 0, "session_row": {}, "session_ids": ["nope"],
    "snapshot": {"session_exists": False}, "model_config_json": None, "end_reason": "done",
    "model": "m", "system_prompt": None, "title": None, "path": None, "idle_days": 1.0, "table": "sessions", "rows": [],
}


def _numeric_parameters() -> list[tuple[str, str, str]]:
    found = []
    for name, method in inspect.getmembers(SessionDB, inspect.isfunction):
        if name.startswith("_") or not (inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)):
            continue
        for param in inspect.signature(method).parameters.values():
            annotation = str(param.annotation)
            kinds = {part.strip() for part in annotation.split("|")}
            if "int" in kinds:
                found.append((name, param.name, "int"))
            elif "float" in kinds:
                found.append((name, param.name, "float"))
    return found


NUMERIC_PARAMETERS = _numeric_parameters()
# Documented to report every failure in the result's "error" instead of raising.
NEVER_RAISE = {"maybe_auto_archive", "maybe_auto_prune_and_vacuum"}


def test_the_sweep_sees_the_numeric_arguments_the_issue_names() -> None:
    names = {(method, arg) for method, arg, _ in NUMERIC_PARAMETERS}
    for expected in [("get_messages", "limit"), ("get_messages", "after_id"), ("search_messages", "offset"),
                     ("list_sessions_rich", "limit"), ("update_token_counts", "input_tokens"),
                     ("update_token_counts", "estimated_cost_usd"), ("get_messages_around", "window"),
                     ("iter_export_all", "max_messages")]:
        assert expected in names
    assert len(NUMERIC_PARAMETERS) >= 40


async def _call(db: SessionDB, method: str, arg: str, value: Any) -> Any:
    signature = inspect.signature(getattr(SessionDB, method))
    kwargs = {
        name: _REQUIRED[name]
        for name, param in signature.parameters.items()
        if name != "self" and param.default is inspect.Parameter.empty
        and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL)
    }
    kwargs[arg] = value
    if inspect.isasyncgenfunction(getattr(SessionDB, method)):
        return [item async for item in getattr(db, method)(**kwargs)]
    return await getattr(db, method)(**kwargs)


@pytest.mark.parametrize(("method", "arg", "kind"), NUMERIC_PARAMETERS, ids=lambda v: str(v))
async def test_every_numeric_argument_refuses_out_of_range_values(
    store: SessionDB, method: str, arg: str, kind: str
) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "keep")
    bad: list[Any] = [2**63, -(2**63) - 1, 10**400] if kind == "int" else [math.nan, math.inf, 10**400]
    for value in bad:
        if method in NEVER_RAISE:
            result = await _call(store, method, arg, value)
            assert re.search(rf"\b{arg}\b", result["error"])
            continue
        with pytest.raises(ValueError, match=rf"\b{arg}\b"):
            await _call(store, method, arg, value)
    assert [r["content"] for r in await store.get_messages("s")] == ["keep"]


@pytest.mark.parametrize(
    ("method", "arg", "kind"),
    [p for p in NUMERIC_PARAMETERS if p[2] == "int"], ids=str,
)
async def test_every_int_argument_takes_the_64_bit_extremes(store: SessionDB, method: str, arg: str, kind: str) -> None:
    """The extremes either work or fail with a documented ValueError (a negative limit, an unknown row id)."""
    await _takes_the_64_bit_extremes(store, method, arg)


async def _takes_the_64_bit_extremes(store: SessionDB, method: str, arg: str) -> None:
    await store.create_session("s", "cli")
    await store.append_message("s", "user", "keep")
    for value in (INT64_MAX, INT64_MIN):
        try:
            await _call(store, method, arg, value)
        except ValueError as exc:
            assert arg in str(exc) or "not found" in str(exc)
        except RuntimeError as exc:  # the generic arguments give an empty handoff: refused after the checks
            assert method == "publish_compression_child" and "must not be empty" in str(exc)
    # Nothing stored is lost (a compaction may archive the row: it is still there).
    assert "keep" in [m["content"] for m in await store.get_messages("s", include_inactive=True)]


# ------------------------------------------------------------------ item 4


async def test_non_finite_costs_are_refused_and_nothing_is_stored(store: SessionDB) -> None:
    for name in ("estimated_cost_usd", "actual_cost_usd"):
        for value in (math.nan, math.inf, -math.inf):
            with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
                await store.update_token_counts("s", input_tokens=1, **{name: value})
            with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
                await store.queue_token_counts("s", input_tokens=1, **{name: value})
    with pytest.raises(ValueError, match="^estimated_cost_usd must be a finite number"):
        await store.record_auxiliary_usage("s", "title", estimated_cost_usd=math.nan)
    await store.flush_token_counts()
    assert await store.get_session("s") is None


async def test_token_counters_saturate_and_stay_integers(store: SessionDB) -> None:
    await store.update_token_counts("s", input_tokens=INT64_MAX - 5, output_tokens=INT64_MIN + 5, api_call_count=1)
    await store.update_token_counts("s", input_tokens=100, output_tokens=-100, api_call_count=INT64_MAX)
    await store.update_token_counts("s", input_tokens=INT64_MAX, reasoning_tokens=INT64_MAX)
    await store.update_token_counts("s", reasoning_tokens=INT64_MAX)
    for _ in range(3):  # coalesced in memory, then added to the stored totals
        await store.queue_token_counts("s", cache_read_tokens=INT64_MAX)
    await store.flush_token_counts()
    session = await store.get_session("s")
    assert session is not None
    expected = {"input_tokens": INT64_MAX, "output_tokens": INT64_MIN, "api_call_count": INT64_MAX,
                "reasoning_tokens": INT64_MAX, "cache_read_tokens": INT64_MAX, "cache_write_tokens": 0}
    assert {k: session[k] for k in expected} == expected
    assert all(type(session[k]) is int for k in expected)
    # Below the limit the sums stay exact.
    await store.update_token_counts("t", input_tokens=INT64_MAX - 10)
    await store.update_token_counts("t", input_tokens=9)
    assert (await store.get_session("t") or {})["input_tokens"] == INT64_MAX - 1


async def test_costs_saturate_at_the_largest_double(store: SessionDB) -> None:
    big = 1.5e308
    await store.update_token_counts("s", estimated_cost_usd=big, actual_cost_usd=-big)
    await store.update_token_counts("s", estimated_cost_usd=big, actual_cost_usd=-big)
    for _ in range(2):
        await store.queue_token_counts("t", estimated_cost_usd=big)
    await store.flush_token_counts()
    session = await store.get_session("s") or {}
    assert (session["estimated_cost_usd"], session["actual_cost_usd"]) == (sys.float_info.max, -sys.float_info.max)
    assert (await store.get_session("t") or {})["estimated_cost_usd"] == sys.float_info.max


async def test_usage_ledger_saturates_too(store: SessionDB) -> None:
    for _ in range(2):
        await store.update_token_counts("s", model="m", input_tokens=INT64_MAX, api_call_count=INT64_MAX)
        await store.record_auxiliary_usage("s", "title", model="m", output_tokens=INT64_MAX)
    rows = await fetch_rows(
        store, "SELECT task, api_call_count, input_tokens, output_tokens FROM session_model_usage ORDER BY task"
    )
    assert rows == [("", INT64_MAX, INT64_MAX, 0), ("title", 2, 0, INT64_MAX)]
    assert all(type(value) is int for row in rows for value in row[1:])  # integers, not REALs
    for _ in range(2):
        await store.update_token_counts("s", model="m", input_tokens=1, estimated_cost_usd=1.5e308)
    assert await fetch_rows(store, "SELECT estimated_cost_usd FROM session_model_usage WHERE task = ''") == [
        (sys.float_info.max,)
    ]


# ------------------------------------------------------------ NUL in text fields

NUL_TEXT = "before\x00after"


@pytest.mark.backends("sqlite")
async def test_sqlite_keeps_nul_in_every_text_field(store: SessionDB) -> None:
    await store.create_session("s", "cli", model=NUL_TEXT, cwd=NUL_TEXT)
    await store.append_message("s", "tool", NUL_TEXT, tool_name=NUL_TEXT, reasoning=NUL_TEXT)
    (row,) = await store.get_messages("s")
    assert (row["content"], row["tool_name"], row["reasoning"]) == (NUL_TEXT, NUL_TEXT, NUL_TEXT)
    session = await store.get_session("s") or {}
    assert (session["model"], session["cwd"]) == (NUL_TEXT, NUL_TEXT)


@pytest.mark.backends("postgres")
async def test_postgres_refuses_nul_outside_content_at_the_call_site(store: SessionDB) -> None:
    """TEXT cannot hold NUL: content keeps it exactly, other text is refused before anything is queued."""
    await store.create_session("s", "cli")
    await store.append_message("s", "user", NUL_TEXT)
    batches = store._actor.batches
    refused = [
        (r"messages\[0\]: tool_name", store.append_message("s", "tool", "x", tool_name=NUL_TEXT)),
        (r"messages\[1\]: reasoning", store.append_messages_batch(
            "s", [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "x", "reasoning": NUL_TEXT}])),
        ("model", store.create_session("t", "cli", model=NUL_TEXT)),
        ("cwd", store.update_session_cwd("s", NUL_TEXT)),
        ("model", store.update_token_counts("s", input_tokens=1, model=NUL_TEXT)),
        ("model", store.queue_token_counts("s", input_tokens=1, model=NUL_TEXT)),
        (r"messages\[0\]: tool_call_id", store.replace_messages("s", [{"role": "tool", "content": "x", "tool_call_id": NUL_TEXT}])),
    ]
    for field, call in refused:
        with pytest.raises(ValueError, match=rf"^{field} must not contain NUL characters"):
            await call
    assert store._actor.batches == batches  # nothing reached the writer
    assert await store.flush_token_counts()
    assert [r["content"] for r in await store.get_messages("s")] == [NUL_TEXT]
    assert await store.get_session("t") is None
    assert (await store.get_session("s") or {})["input_tokens"] == 0


async def test_ids_with_lone_surrogates_are_refused_at_the_call_site(store: SessionDB) -> None:
    """A lone surrogate cannot be stored as text by either backend: a ValueError naming the argument, nothing written."""
    bad = "session-\udc80"
    with pytest.raises(ValueError, match="session_id must not contain lone surrogates"):
        await store.create_session(bad, "cli")
    with pytest.raises(ValueError, match="session_id must not contain lone surrogates"):
        await store.append_message(bad, "user", "x")
    with pytest.raises(ValueError, match="key must not contain lone surrogates"):
        await store.set_meta("k\ud800", "v")
    assert await store.session_count() == 0
    await store.create_session("ünïcode-ok-✓", "cli")  # other non-ASCII ids stay fine
    assert (await store.get_session("ünïcode-ok-✓"))["id"] == "ünïcode-ok-✓"
