"""Helpers shared by the framework adapter tests."""

from __future__ import annotations

from hermes_state import SessionDB


def reopen(store: SessionDB) -> SessionDB:
    """A second, independent store over the same data as ``store`` (same backend, same file or schema).

    ``db_path`` is the file on SQLite and the (password-free) DSN on PostgreSQL.
    """
    return type(store)(store.db_path)


# Items of every kind the Agents SDK puts in a session, shaped as its TypedDicts
# (ids, statuses, encrypted reasoning, nested outputs, non-ASCII text, numbers).
SDK_ITEMS: list[dict] = [
    {"role": "user", "content": "Wie wird das Wetter in Paris? ☀"},
    {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Answer briefly."}]},
    {"type": "message", "role": "developer", "content": "Prefer metric units."},
    {
        "id": "rs_01",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Need the weather tool for Paris."}],
        "encrypted_content": "gAAAAABo-opaque==",
    },
    {
        "id": "fc_01",
        "type": "function_call",
        "call_id": "call_weather_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris", "units": "metric"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_weather_1", "output": "18.5 C and sunny"},
    {
        "id": "fc_02",
        "type": "function_call",
        "call_id": "call_handoff_1",
        "name": "transfer_to_french_agent",
        "arguments": "{}",
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_handoff_1", "output": '{"assistant": "French agent"}'},
    {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Il fait 18,5 °C.", "annotations": [], "logprobs": []}],
    },
    {
        "id": "msg_02",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "I cannot share that."}],
    },
    {"id": "ws_01", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "paris"}},
    {
        "id": "fs_01",
        "type": "file_search_call",
        "queries": ["quarterly report"],
        "status": "completed",
        "results": [{"file_id": "file_1", "score": 0.875, "text": "Revenue grew", "attributes": {"page": 3}}],
    },
    {
        "id": "cu_01",
        "type": "computer_call",
        "call_id": "call_cu_1",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_cu_1",
        "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
    },
    {"id": "mcpl_01", "type": "mcp_list_tools", "server_label": "docs", "tools": [{"name": "lookup", "input_schema": {}}]},
    {
        "id": "mcpr_01",
        "type": "mcp_approval_request",
        "server_label": "docs",
        "name": "lookup",
        "arguments": '{"q": "x"}',
    },
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_01", "approve": True, "id": None},
    {
        "id": "mcp_01",
        "type": "mcp_call",
        "server_label": "docs",
        "name": "lookup",
        "arguments": '{"q": "x"}',
        "output": "found",
        "error": None,
    },
    {"type": "custom_tool_call", "call_id": "call_c_1", "name": "grammar", "input": "SELECT 1"},
    {"type": "custom_tool_call_output", "call_id": "call_c_1", "output": [{"type": "input_text", "text": "1"}]},
    {"id": "ig_01", "type": "image_generation_call", "status": "completed", "result": None},
    {
        "id": "ci_01",
        "type": "code_interpreter_call",
        "code": "print(6*7)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "42"}],
        "status": "completed",
    },
    {
        "id": "ls_01",
        "type": "local_shell_call",
        "call_id": "call_ls_1",
        "action": {"type": "exec", "command": ["ls", "-l"], "env": {}},
        "status": "completed",
    },
    {"id": "ls_01", "type": "local_shell_call_output", "output": "total 0"},
    {"type": "item_reference", "id": "msg_00"},
    {"type": "compaction", "encrypted_content": "opaque-compaction-blob"},
]
