"""The body of POST /v1/responses.

Fields the Responses API defines that mstar does not offer are declared (``Any``) so that they are
known, and refused with a 400 naming them; see ``field_rows`` for each one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator

from mstar.api_server.http.bounds import MESSAGES, TOOLS, Counted
from mstar.api_server.openai.protocol import MAX_INT32, NonEmptyStr, StrictModel

NOT_SUPPORTED = "Not supported: a 400 unless null."
TOOL_CHOICE_MODES = ("none", "auto", "required")


class InputAudio(StrictModel):
    data: NonEmptyStr = Field(description="The audio file, base64 (WAV, FLAC, MP3, OGG).")
    format: NonEmptyStr = Field(description="wav, mp3, flac, ogg or opus.")


class ContentPart(StrictModel):
    """One part of a message's content: text parts (input_text, output_text), and input_audio
    for a model that takes audio."""

    type: NonEmptyStr
    text: str | None = None
    input_audio: InputAudio | None = None
    annotations: list[Any] | None = Field(None, description="Ignored (output_text sent back).")
    logprobs: list[Any] | None = Field(None, description="Ignored (output_text sent back).")


Content = str | list[ContentPart]


class InputItem(StrictModel):
    """One item of ``input``: a message (``type`` message, or absent), a ``function_call`` the
    model made, the ``function_call_output`` answering it, or a ``reasoning`` item (skipped)."""

    type: Literal["message", "function_call", "function_call_output", "reasoning"] = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: Content | None = None
    id: str | None = None
    status: str | None = None
    call_id: NonEmptyStr | None = None
    name: str | None = None
    arguments: str | None = None
    output: Content | None = None
    summary: list[Any] | None = None
    encrypted_content: str | None = None


class FunctionTool(StrictModel):
    """One entry of ``tools``: a function (any other ``type``, a built-in tool, is a 400)."""

    type: NonEmptyStr
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def resolved(self) -> dict[str, Any]:
        """The tool as the response echoes it: ``strict`` is true unless it says false (OpenAI's
        Responses API default, unlike chat's)."""
        return {**self.model_dump(exclude_none=True), "strict": self.strict is not False}


class FunctionChoice(StrictModel):
    type: Literal["function"]
    name: str


def _tool_choice(value: Any) -> str | FunctionChoice:
    if isinstance(value, str) and value in TOOL_CHOICE_MODES:
        return value
    if isinstance(value, dict):
        return FunctionChoice.model_validate(value)
    raise ValueError("must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}")


ToolChoice = Annotated[Literal["none", "auto", "required"] | FunctionChoice,
                       PlainValidator(_tool_choice, json_schema_input_type=Literal[
                           "none", "auto", "required"] | FunctionChoice)]


class TextFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    name: str = Field("response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(StrictModel):
    format: TextFormat | None = None
    verbosity: Any = Field(None, description=NOT_SUPPORTED + " (\"medium\" passes)")


class StreamOptions(StrictModel):
    include_obfuscation: bool = Field(False, description="Ignored: events are never padded.")


class ResponsesRequest(StrictModel):
    model: str | None = Field(None, description="The served model name or an alias.")
    input: str | Annotated[list[InputItem], Field(min_length=1)]
    instructions: str | None = Field(None, description="A system message before the input "
                                     "(not carried over by previous_response_id).")
    previous_response_id: NonEmptyStr | None = Field(
        None, description="Continue a stored response: its input and output come first.")
    store: bool = Field(True, description="Keep the response for GET, DELETE and "
                        "previous_response_id (MSTAR_RESPONSES_STORE_*).")
    tools: list[FunctionTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    include: list[str] | None = Field(None, description="Only 'reasoning.encrypted_content' "
                                      "(nothing to add: reasoning is never encrypted).")
    truncation: Any = Field(None, description="'disabled' only: a 400 unless null or 'disabled'.")
    # Ignored by design.
    metadata: dict[str, str] | None = Field(None, description="Echoed and stored.")
    user: str | None = Field(None, description="Ignored (informational).")
    service_tier: str | None = Field(None, description="Ignored: one tier.")
    safety_identifier: str | None = Field(None, description="Ignored (informational).")
    prompt_cache_key: str | None = Field(None, description="Ignored: prefix caching is automatic.")
    prompt_cache_retention: str | None = Field(None, description="Ignored.")
    prompt_cache_options: dict[str, Any] | None = Field(None, description="Ignored.")
    # Refused unless null (or the value that asks for nothing).
    background: Any = Field(None, description=NOT_SUPPORTED + " (false passes)")
    conversation: Any = Field(None, description=NOT_SUPPORTED)
    prompt: Any = Field(None, description=NOT_SUPPORTED)
    reasoning: Any = Field(None, description=NOT_SUPPORTED)
    max_tool_calls: Any = Field(None, description=NOT_SUPPORTED)
    top_logprobs: Any = Field(None, description=NOT_SUPPORTED + " (0 passes)")
    context_management: Any = Field(None, description=NOT_SUPPORTED)

    def counted(self) -> list[Counted]:
        items = 1 if isinstance(self.input, str) else len(self.input)
        return [Counted(TOOLS, "tools", len(self.tools or [])), Counted(MESSAGES, "input", items)]
