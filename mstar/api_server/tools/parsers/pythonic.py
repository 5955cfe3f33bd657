"""Pythonic calls (Llama 3.2 / Llama 4 templates): the reply is a Python list of calls with
keyword arguments of literal values, ``[get_weather(city="Paris"), get_time()]``, optionally
between ``<|python_start|>`` and ``<|python_end|>``. Read with ``ast`` (never evaluated)."""

from __future__ import annotations

import ast
import json

from mstar.api_server.tools.parsers.calls import Declared, ToolCall
from mstar.api_server.tools.parsers.leading import MORE, NOT_CALLS, LeadingCallsStream, Read

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"


def read_calls(text: str) -> Read:
    """The list of calls at the front of ``text``: the shortest prefix ending in ``]`` that parses
    as a Python expression."""
    body = text.lstrip()
    if body.startswith(PYTHON_END):
        return [], len(text) - len(body) + len(PYTHON_END)
    if not body or PYTHON_END.startswith(body):
        return MORE
    if body[0] != "[":
        return NOT_CALLS
    at = body.find("]")
    while at >= 0:
        try:
            tree = ast.parse(body[:at + 1], mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            at = body.find("]", at + 1)
            continue
        calls = _calls(tree.body)
        if calls is None:
            return NOT_CALLS
        return calls, len(text) - len(body) + at + 1
    return MORE


def _calls(node: ast.expr) -> list[ToolCall] | None:
    if not isinstance(node, ast.List) or not node.elts:
        return None
    calls = []
    for item in node.elts:
        if not (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and not item.args
                and all(k.arg is not None for k in item.keywords)):
            return None
        try:
            arguments = {k.arg: ast.literal_eval(k.value) for k in item.keywords}
            text = json.dumps(arguments, ensure_ascii=False)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        calls.append(ToolCall(item.func.id, text))
    return calls


def stream(declared: Declared) -> LeadingCallsStream:
    return LeadingCallsStream((PYTHON_START,), "[", read_calls, declared)
