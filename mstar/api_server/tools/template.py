"""What the chat template gets: the messages (with past calls and tool results) and the tools.

A template that uses ``tools`` (Qwen2.5, Qwen3, Llama 3.1, ...) gets them as
``apply_chat_template(tools=...)``, and the messages in the Hugging Face shape: an assistant's
``tool_calls`` with ``arguments`` as an object, ``role: "tool"`` messages with ``tool_call_id``.

A template that ignores tools (the built-in SmolLM2's plain ChatML) gets them as text it can carry,
in the hermes style: the tool list and how to call one go into the system message; an assistant's
past calls become ``<tool_call>`` lines after its text; tool results become a user message of
``<tool_response>`` blocks (consecutive results share one).
"""

from __future__ import annotations

import json
from typing import Any

from mstar.api_server.tools.parsers.hermes import call_text
from mstar.api_server.tools.parsers.registry import template_source

TOOLS_INTRO = (
    "You can call functions to answer the user. Each function is described by a JSON object "
    "between <tools> and </tools>:")
CALL_HOWTO = (
    "To call a function, answer with a JSON object holding its name and its arguments between "
    "<tool_call> and </tool_call>, like this:\n<tool_call>\n"
    '{"name": "function_name", "arguments": {"argument": "value"}}\n</tool_call>\n'
    "Results come back between <tool_response> and </tool_response>.")


def template_inputs(messages: list[Any], tools: list[dict] | None,
                    chat_template: Any) -> tuple[list[dict], dict[str, Any]]:
    """The messages and extra ``apply_chat_template`` arguments for this template.

    ``messages`` are validated ChatMessage objects; ``tools`` the OpenAI tool objects to show the
    model, None when it should see none (no tools, or tool_choice none).
    """
    if template_takes_tools(chat_template):
        return [_hf_message(m) for m in messages], ({"tools": tools} if tools else {})
    return _with_tools_prompt(_text_messages(messages), tools), {}


def template_takes_tools(chat_template: Any) -> bool:
    return "tools" in template_source(chat_template)


def _hf_message(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": msg.role, "content": msg.text()}
    if msg.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": json.loads(c.function.arguments)}}
            for c in msg.tool_calls]
    if msg.tool_call_id is not None:
        out["tool_call_id"] = msg.tool_call_id
    name = getattr(msg, "name", None)
    if isinstance(name, str):
        out["name"] = name
    return out


def _text_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    previous_role = None
    for msg in messages:
        if msg.role == "tool":
            block = f"<tool_response>\n{msg.text()}\n</tool_response>"
            if previous_role == "tool":
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        elif msg.tool_calls:
            calls = [call_text(c.function.name, json.loads(c.function.arguments))
                     for c in msg.tool_calls]
            out.append({"role": msg.role, "content": "\n".join(filter(None, [msg.text(), *calls]))})
        else:
            out.append({"role": msg.role, "content": msg.text()})
        previous_role = msg.role
    return out


def _with_tools_prompt(messages: list[dict[str, Any]], tools: list[dict] | None
                       ) -> list[dict[str, Any]]:
    if not tools:
        return messages
    listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    prompt = f"{TOOLS_INTRO}\n<tools>\n{listing}\n</tools>\n{CALL_HOWTO}"
    if messages and messages[0]["role"] == "system":
        first = {"role": "system", "content": f"{messages[0]['content']}\n\n{prompt}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]
