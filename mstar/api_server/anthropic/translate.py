"""A Messages request as a chat completions request (``ChatCompletionRequest`` fields), with the
origin of each chat message so that an error can name the Messages field to blame.

``system`` becomes a first system message. A user message's ``tool_result`` blocks become
``tool`` messages and its text blocks a user message, in block order; an assistant message's
``tool_use`` blocks become its ``tool_calls`` (the ``input`` object as JSON text). A final
assistant message with text (a "prefill", such as ``{"a":``) is continued: the prompt ends inside
it and the answer's content is what comes after it, as in Anthropic's API.
"""

from __future__ import annotations

import json
import re
from typing import Any

from mstar.api_server.anthropic.protocol import ContentBlock, Message, MessagesRequest, TextBlock
from mstar.api_server.http.errors import APIError
from mstar.api_server.openai.chat_plan import ChatTranslation

BLOCKS = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use")}
BLOCK_FIELDS = {"text": ("text",), "tool_use": ("id", "name", "input"),
                "tool_result": ("tool_use_id",)}
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}
AUDIO_BLOCKS = ("audio", "input_audio")  # Anthropic's API defines no audio input: refused by name



def check_not_audio(block: ContentBlock, param: str) -> None:
    if block.type in AUDIO_BLOCKS:
        raise APIError(400, f"`{param}.type`: audio is not supported by the Messages API (it has "
                       "no audio blocks); send input_audio parts to /v1/chat/completions or "
                       "/v1/responses", f"{param}.type")


def check_request(req: MessagesRequest) -> None:
    """What the types cannot say: which blocks each role may send, and each block's fields; tools
    are client tools with a schema; a named tool_choice names one."""
    for i, msg in enumerate(req.messages):
        for j, block in enumerate(msg.content if isinstance(msg.content, list) else []):
            param = f"messages.{i}.content.{j}"
            check_not_audio(block, param)
            if block.type not in BLOCKS[msg.role]:
                raise APIError(400, f"`{param}.type`: '{block.type[:40]}' blocks are not "
                               f"supported in {msg.role} messages (text, and tool calls and "
                               "results)", f"{param}.type")
            for name in BLOCK_FIELDS[block.type]:
                if getattr(block, name) is None:
                    raise APIError(400, f"a {block.type} block needs '{name}'", f"{param}.{name}")
            _check_text_blocks(block.content if isinstance(block.content, list) else [],
                               f"{param}.content")
    _check_text_blocks(req.system if isinstance(req.system, list) else [], "system")
    for i, tool in enumerate(req.tools or []):
        if tool.type not in (None, "custom"):
            raise APIError(400, f"`tools.{i}.type` is not supported: '{tool.type[:40]}' (client "
                           "tools only; no server tools)", f"tools.{i}.type")
        if tool.input_schema is None:
            raise APIError(400, "a tool needs 'input_schema'", f"tools.{i}.input_schema")
    if req.output_config is not None and req.output_config.effort is not None:
        raise APIError(400, "`output_config.effort` is not supported: no reasoning controls",
                       "output_config.effort")
    _check_prefill(req)
    choice = req.tool_choice
    if choice is not None and choice.type == "tool" and choice.name is None:
        raise APIError(400, "tool_choice of type 'tool' needs 'name'", "tool_choice.name")


def prefill(req: MessagesRequest) -> str | None:
    """The text of a final assistant message (Anthropic's "prefill"), which the output continues;
    None when the request ends with a user turn, or an assistant turn with no text or with tool
    calls (those are answered by a new turn)."""
    last = req.messages[-1] if req.messages else None
    turn = _assistant(last) if last is not None and last.role == "assistant" else {}
    return None if "tool_calls" in turn else turn.get("content")


def _check_prefill(req: MessagesRequest) -> None:
    """As Anthropic's API: a prefill may not end in whitespace (a token boundary the model would
    not have chosen)."""
    text = prefill(req)
    if text is not None and text != text.rstrip():
        param = f"messages.{len(req.messages) - 1}.content"
        raise APIError(400, "final assistant content cannot end with trailing whitespace", param)


def _check_text_blocks(blocks: list[TextBlock], param: str) -> None:
    for j, block in enumerate(blocks):
        if block.type != "text" or block.text is None:
            raise APIError(400, f"`{param}.{j}`: only text blocks with 'text' are supported",
                           f"{param}.{j}")


def _text(content: str | list[Any] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(block.text or "" for block in content)


def _tool_call(block: ContentBlock) -> dict[str, Any]:
    return {"id": block.id, "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(block.input)}}


def _assistant(msg: Message) -> dict[str, Any]:
    blocks = msg.content if isinstance(msg.content, list) else []
    calls = [_tool_call(b) for b in blocks if b.type == "tool_use"]
    text = msg.content if isinstance(msg.content, str) else _text(
        [b for b in blocks if b.type == "text"])
    return {"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}


def _user(msg: Message, param: str) -> list[tuple[dict[str, Any], str]]:
    """Tool messages for the results and user messages for the text, in block order."""
    if isinstance(msg.content, str):
        return [({"role": "user", "content": msg.content}, param)]
    out: list[tuple[dict[str, Any], str]] = []
    for j, block in enumerate(msg.content):
        if block.type == "tool_result":
            out.append(({"role": "tool", "tool_call_id": block.tool_use_id,
                         "content": _text(block.content)}, f"{param}.content.{j}"))
        elif out and out[-1][0]["role"] == "user":
            out[-1][0]["content"] += block.text or ""
        else:
            out.append(({"role": "user", "content": block.text or ""}, f"{param}.content.{j}"))
    return out


def _tool_choice(req: MessagesRequest) -> Any:
    choice = req.tool_choice
    if choice is None:
        return None
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return TOOL_CHOICES[choice.type]


RENAMES = [(re.compile(r"^tool_choice\.function\."), "tool_choice."),
           (re.compile(r"^tools\.(\d+)\.function\.parameters"), r"tools.\1.input_schema"),
           (re.compile(r"^tools\.(\d+)\.function\."), r"tools.\1."),
           (re.compile(r"^response_format\.json_schema\.schema"), "output_config.format.schema"),
           (re.compile(r"^response_format.*"), "output_config.format"),
           (re.compile(r"^max_completion_tokens$"), "max_tokens"),
           (re.compile(r"^stop(\.|$)"), r"stop_sequences\1")]


def _response_format(req: MessagesRequest) -> dict[str, Any] | None:
    fmt = req.output_config.format if req.output_config is not None else None
    if fmt is None:
        return None
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt.json_schema}}


def to_chat(req: MessagesRequest) -> ChatTranslation:
    pairs: list[tuple[dict[str, Any], str]] = []
    if req.system:
        pairs.append(({"role": "system", "content": _text(req.system)}, "system"))
    for i, msg in enumerate(req.messages):
        if msg.role == "assistant":
            pairs.append((_assistant(msg), f"messages.{i}"))
        else:
            pairs += _user(msg, f"messages.{i}")
    tools = [{"type": "function", "function": {k: v for k, v in {
        "name": t.name, "description": t.description, "parameters": t.input_schema,
        "strict": t.strict}.items() if v is not None}} for t in req.tools or []]
    parallel = req.tool_choice is None or not req.tool_choice.disable_parallel_tool_use
    body = {"model": req.model, "messages": [m for m, _ in pairs], "tools": tools or None,
            "tool_choice": _tool_choice(req), "parallel_tool_calls": parallel,
            "response_format": _response_format(req), "max_completion_tokens": req.max_tokens,
            "stop": req.stop_sequences, "temperature": req.temperature, "top_p": req.top_p,
            "top_k": req.top_k}
    return ChatTranslation({k: v for k, v in body.items() if v is not None},
                           [origin for _, origin in pairs], RENAMES, "messages",
                           continue_final=prefill(req) is not None)
