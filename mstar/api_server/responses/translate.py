"""A Responses request as a chat completions request (``ChatCompletionRequest`` fields), with the
origin of each chat message so that an error can name the Responses field to blame.

``input`` items become chat messages: a message as it is (text parts, and input_audio parts for
a model that takes audio), a ``function_call``
an assistant message's tool call (consecutive calls, and the assistant text before them, share one
message), a ``function_call_output`` a ``tool`` message; ``reasoning`` items are not shown to the
model. ``instructions`` become a first system message.
"""

from __future__ import annotations

import re
from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.api_server.openai.chat_plan import ChatTranslation
from mstar.api_server.responses.protocol import Content, ContentPart, InputItem, ResponsesRequest

TEXT_PARTS = ("input_text", "output_text", "text")
AUDIO_PART = "input_audio"
INCLUDABLE = ("reasoning.encrypted_content",)
ITEM_FIELDS = {"message": ("role", "content"), "function_call": ("call_id", "name", "arguments"),
               "function_call_output": ("call_id", "output")}



def input_items(req: ResponsesRequest) -> list[InputItem]:
    """``input`` as items: a string is one user message."""
    if isinstance(req.input, str):
        return [InputItem(role="user", content=req.input)]
    return list(req.input)


def check_request(req: ResponsesRequest) -> None:
    """What the types cannot say: each input item has its type's fields, tools are functions,
    ``include`` asks only for what there is."""
    for i, item in enumerate(req.input if isinstance(req.input, list) else []):
        for name in ITEM_FIELDS.get(item.type, ()):
            if getattr(item, name) is None:
                raise APIError(400, f"a {item.type} item needs '{name}'", f"input.{i}.{name}")
    for i, tool in enumerate(req.tools or []):
        if tool.type != "function":
            raise APIError(400, f"`tools.{i}.type` is not supported: '{tool.type[:40]}' (only "
                           "function tools; no built-in tools)", f"tools.{i}.type")
        if tool.name is None:
            raise APIError(400, "a function tool needs 'name'", f"tools.{i}.name")
    if req.text is not None and req.text.verbosity not in (None, "medium"):
        raise APIError(400, "`text.verbosity` is not supported: only \"medium\" passes",
                       "text.verbosity")
    for i, entry in enumerate(req.include or []):
        if entry not in INCLUDABLE:
            raise APIError(400, f"`include.{i}` is not supported: {entry[:60]!r}", f"include.{i}")


def _content(content: Content | None, param: str) -> str | list[dict[str, Any]]:
    """A message's content for chat: its text, or its parts when it carries audio (the chat
    request then checks that the model takes audio, and loads it)."""
    if isinstance(content, list) and any(part.type == AUDIO_PART for part in content):
        return [{"type": AUDIO_PART, "input_audio": part.input_audio.model_dump()}
                if part.type == AUDIO_PART and part.input_audio is not None
                else {"type": "text", "text": _part_text(part, f"{param}.{j}")}
                for j, part in enumerate(content)]
    return _text(content, param)


def _text(content: Content | None, param: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(_part_text(part, f"{param}.{j}") for j, part in enumerate(content))


def _part_text(part: ContentPart, param: str) -> str:
    if part.type not in TEXT_PARTS:
        raise APIError(400, f"`{param}`: '{part.type[:40]}' content parts are not supported "
                       "(the model takes text only)", param)
    if part.text is None:
        raise APIError(400, f"`{param}`: a text part needs 'text'", f"{param}.text")
    return part.text


def _message(item: InputItem, param: str) -> dict[str, Any]:
    if item.type == "function_call":
        call = {"id": item.call_id, "type": "function",
                "function": {"name": item.name, "arguments": item.arguments}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if item.type == "function_call_output":
        return {"role": "tool", "tool_call_id": item.call_id,
                "content": _text(item.output, f"{param}.output")}
    return {"role": item.role, "content": _content(item.content, f"{param}.content")}


def _joins(previous: dict[str, Any], message: dict[str, Any]) -> bool:
    """A call continues the assistant turn before it (its text, or the calls already made)."""
    return bool(message.get("tool_calls")) and previous["role"] == "assistant"


def chat_messages(items: list[tuple[InputItem, str]]) -> tuple[list[dict], list[str]]:
    """The chat messages of (item, its field) pairs, and each message's origin."""
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    for item, param in items:
        if item.type == "reasoning":
            continue
        message = _message(item, param)
        if messages and _joins(messages[-1], message):
            messages[-1]["tool_calls"] = [*(messages[-1].get("tool_calls") or []),
                                          *message["tool_calls"]]
            continue
        messages.append(message)
        origins.append(param)
    return messages, origins


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice.name}}


def _response_format(req: ResponsesRequest) -> dict[str, Any] | None:
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    spec = {"name": fmt.name, "description": fmt.description, "schema": fmt.json_schema,
            "strict": fmt.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}


RENAMES = [(re.compile(r"^tool_choice\.function\."), "tool_choice."),
           (re.compile(r"^tools\.(\d+)\.function\."), r"tools.\1."),
           (re.compile(r"^response_format\.json_schema\.schema"), "text.format.schema"),
           (re.compile(r"^response_format.*"), "text.format"),
           (re.compile(r"^max_(completion_)?tokens$"), "max_output_tokens")]


def to_chat(req: ResponsesRequest, history: list[InputItem]) -> ChatTranslation:
    """The chat request of ``req`` after ``history`` (a stored response's input and output)."""
    items = [(item, "previous_response_id") for item in history]
    items += [(item, "input" if isinstance(req.input, str) else f"input.{i}")
              for i, item in enumerate(input_items(req))]
    messages, origins = chat_messages(items)
    if req.instructions:
        messages.insert(0, {"role": "system", "content": req.instructions})
        origins.insert(0, "instructions")
    tools = [{"type": "function", "function": {k: v for k, v in tool.resolved().items()
                                                if k != "type"}} for tool in req.tools or []]
    body = {"model": req.model, "messages": messages, "tools": tools or None,
            "tool_choice": _tool_choice(req.tool_choice),
            "parallel_tool_calls": req.parallel_tool_calls,
            "response_format": _response_format(req),
            "max_completion_tokens": req.max_output_tokens,
            "temperature": req.temperature, "top_p": req.top_p}
    return ChatTranslation({k: v for k, v in body.items() if v is not None}, origins, RENAMES,
                           "input")
