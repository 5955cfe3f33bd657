"""The checks pydantic cannot express on tool fields: each failure is a 400 naming the field."""

from __future__ import annotations

import json
import re
from typing import Any

from mstar.api_server.http.errors import APIError

FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names


def check_tools(tools: list[Any]) -> None:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool.function.name
        if not FUNCTION_NAME.match(name):
            raise APIError(400, f"function name {name!r} must be 1-64 characters of a-z, A-Z, "
                           "0-9, '_' and '-'", f"tools.{i}.function.name")
        if name in seen:
            raise APIError(400, f"function name {name!r} appears twice in tools",
                           f"tools.{i}.function.name")
        seen.add(name)
        if tool.function.parameters is not None:
            check_parameters(tool.function.parameters, f"tools.{i}.function.parameters")


def check_parameters(schema: dict[str, Any], param: str) -> None:
    """A valid JSON schema (of its own draft, 2020-12 when it names none) of an object."""
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise APIError(400, f"not a valid JSON schema{f' at {where}' if where else ''}: "
                       f"{exc.message}", param) from None
    except RecursionError:
        raise APIError(400, "not a valid JSON schema: nested too deeply", param) from None
    if schema.get("type", "object") != "object":
        raise APIError(400, "must be the schema of an object (type \"object\")", param)


def check_tool_messages(messages: list[Any]) -> None:
    """Calls only on assistant messages, their arguments JSON objects; every tool message answers
    a call of an earlier assistant message."""
    call_ids: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.tool_calls and msg.role != "assistant":
            raise APIError(400, f"only assistant messages carry tool_calls, not {msg.role!r}",
                           f"messages.{i}.tool_calls")
        for j, call in enumerate(msg.tool_calls or []):
            _check_arguments(call.function.arguments, f"messages.{i}.tool_calls.{j}.function.arguments")
            call_ids.add(call.id)
        if msg.role == "tool":
            if msg.tool_call_id is None:
                raise APIError(400, "a tool message needs the tool_call_id it answers",
                               f"messages.{i}.tool_call_id")
            if msg.tool_call_id not in call_ids:
                raise APIError(400, f"tool_call_id {msg.tool_call_id!r} answers no tool call of "
                               "an earlier assistant message", f"messages.{i}.tool_call_id")
        elif msg.tool_call_id is not None:
            raise APIError(400, f"only tool messages carry tool_call_id, not {msg.role!r}",
                           f"messages.{i}.tool_call_id")


def _check_arguments(arguments: str, param: str) -> None:
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise APIError(400, f"arguments must be JSON text of an object: {exc}", param) from None
    except RecursionError:
        raise APIError(400, "arguments must be JSON text of an object: nested too deeply",
                       param) from None
    if not isinstance(value, dict):
        raise APIError(400, "arguments must be JSON text of an object", param)
