"""Llama 3.1 / 3.2 JSON calls: the reply is ``{"name": ..., "parameters": {...}}`` (``arguments``
is taken too), optionally after ``<|python_tag|>``; several calls are separated by ``;``."""

from __future__ import annotations

import json

from mstar.api_server.tools.parsers.calls import Declared, ToolCall
from mstar.api_server.tools.parsers.leading import MORE, NOT_CALLS, LeadingCallsStream, Read

PYTHON_TAG = "<|python_tag|>"
SEPARATORS = " \t\r\n;"


def read_call(text: str) -> Read:
    """One JSON call at the front of ``text`` (after separators)."""
    body = text.lstrip(SEPARATORS)
    if not body:
        return MORE
    if body[0] != "{":
        return NOT_CALLS
    try:
        obj, end = json.JSONDecoder(strict=False).raw_decode(body)
    except (ValueError, RecursionError):  # deep nesting in model output is not a call
        return MORE  # incomplete (or broken: then it stays content at the end)
    call = to_call(obj)
    return NOT_CALLS if call is None else ([call], len(text) - len(body) + end)


def to_call(obj: object) -> ToolCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    arguments = obj.get("parameters", obj.get("arguments", {}))
    if not isinstance(arguments, dict):
        return None
    return ToolCall(obj["name"], json.dumps(arguments, ensure_ascii=False))


def stream(declared: Declared) -> LeadingCallsStream:
    return LeadingCallsStream((PYTHON_TAG,), "{", read_call, declared)
