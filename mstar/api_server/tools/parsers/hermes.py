"""The hermes format (Qwen2/Qwen2.5/Qwen3 templates, NousResearch Hermes):
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one JSON object per call."""

from __future__ import annotations

import json

from mstar.api_server.tools.parsers.calls import Declared, ToolCall
from mstar.api_server.tools.parsers.tagged import TaggedCallStream

START = "<tool_call>"
END = "</tool_call>"


def call_text(name: str, arguments: dict) -> str:
    """One call as the model writes it (how past calls are shown to a template without tools)."""
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{START}\n{body}\n{END}"


def decode(body: str) -> ToolCall | None:
    """The call in ``body``, or None when it is not a JSON object with a string ``name`` and an
    object ``arguments`` (absent ``arguments`` means none). A raw newline or tab inside a string
    (which strict JSON forbids, and some grammars let through) is taken, and escaped in the
    returned arguments."""
    try:
        obj = json.loads(body, strict=False)  # raw control characters in strings are kept
    except (ValueError, RecursionError):  # deep nesting in model output is not a call
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return ToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False))


def stream(declared: Declared) -> TaggedCallStream:
    return TaggedCallStream(START, END, decode, declared)
