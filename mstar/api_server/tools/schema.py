"""Pydantic models of the tool-calling request fields (OpenAI's chat completions shapes)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, PlainValidator


class FunctionDefinition(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments object
    strict: bool | None = None


class ChatTool(BaseModel):
    """One entry of ``tools``."""

    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice: {"type": "function", "function": {"name": ...}}``: call exactly this one."""

    type: Literal["function"]
    function: FunctionName


ToolChoiceMode = Literal["none", "auto", "required"]
TOOL_CHOICE_MODES = ("none", "auto", "required")


def _tool_choice(value: Any) -> str | NamedToolChoice:
    """One error at ``tool_choice`` (or inside the named choice), not one per union branch."""
    if isinstance(value, str) and value in TOOL_CHOICE_MODES:
        return value
    if isinstance(value, dict):
        return NamedToolChoice.model_validate(value)
    raise ValueError("must be 'none', 'auto', 'required' or "
                     '{"type": "function", "function": {"name": ...}}')


ToolChoice = Annotated[ToolChoiceMode | NamedToolChoice,
                       PlainValidator(_tool_choice,
                                      json_schema_input_type=ToolChoiceMode | NamedToolChoice)]


class CalledFunction(BaseModel):
    name: str
    arguments: str  # JSON text of the arguments object, as OpenAI returns it


class AssistantToolCall(BaseModel):
    """One entry of an assistant message's ``tool_calls``, sent back on the next turn."""

    id: str
    type: Literal["function"]
    function: CalledFunction
