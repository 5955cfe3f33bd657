"""Qwen3-Coder's XML calls, one per ``<tool_call>`` block::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A parameter's value is text (one newline on each side is not part of it); it becomes JSON by the
function's schema: a ``string`` property stays text, any other type is read as JSON (text when it
is not JSON), and so is a property the schema does not declare.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mstar.api_server.tools.parsers.calls import Declared, ToolCall
from mstar.api_server.tools.parsers.tagged import TaggedCallStream

START = "<tool_call>"
END = "</tool_call>"
FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.S)
PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)


def decoder(declared: Declared):
    def decode(body: str) -> ToolCall | None:
        match = FUNCTION.fullmatch(body)
        if match is None:
            return None
        name, inner = match[1].strip(), match[2]
        properties = declared.functions.get(name, {}).get("properties", {})
        arguments: dict[str, Any] = {}
        at = 0
        for param in PARAMETER.finditer(inner):
            if inner[at:param.start()].strip():
                return None
            key = param[1].strip()
            arguments[key] = _value(_unwrap(param[2]), properties.get(key, {}))
            at = param.end()
        if inner[at:].strip():
            return None
        return ToolCall(name, json.dumps(arguments, ensure_ascii=False))

    return decode


def _unwrap(text: str) -> str:
    text = text[1:] if text.startswith("\n") else text
    return text[:-1] if text.endswith("\n") else text


def _value(text: str, schema: Any) -> Any:
    types = schema.get("type") if isinstance(schema, dict) else None
    if types == "string" or (isinstance(types, list) and types == ["string"]):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # deep nesting in model output is not a call
        return text


def stream(declared: Declared) -> TaggedCallStream:
    return TaggedCallStream(START, END, decoder(declared), declared)
