"""The body of POST /v1/messages (Anthropic's Messages API).

Fields Anthropic defines that mstar does not offer are declared (``Any``) so that they are known,
and refused with a 400 naming them; see ``field_rows`` for each one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mstar.api_server.http.bounds import MESSAGES, STOP_STRINGS, TOOLS, Counted
from mstar.api_server.openai.protocol import MAX_INT32, NonEmptyStr, StrictModel

NOT_SUPPORTED = "Not supported: a 400 unless null."
IGNORED_CACHE = "Ignored: prefix caching is automatic."


class TextBlock(StrictModel):
    """A text block (of ``system``, or of a tool result's content)."""

    type: NonEmptyStr
    text: str | None = None
    cache_control: dict[str, Any] | None = Field(None, description=IGNORED_CACHE)
    citations: list[Any] | None = Field(None, description="Ignored.")


class ContentBlock(StrictModel):
    """One block of a message: ``text``, ``tool_use`` (assistant) or ``tool_result`` (user).
    Any other type (image, document, thinking, ...) is a 400 naming it."""

    type: NonEmptyStr
    text: str | None = None
    id: str | None = None  # tool_use
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None  # tool_result
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = Field(None, description=IGNORED_CACHE)
    citations: list[Any] | None = Field(None, description="Ignored.")


class Message(StrictModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(StrictModel):
    """A client tool; a server tool (a ``type`` other than ``custom``) is a 400."""

    name: NonEmptyStr
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    strict: bool | None = None
    cache_control: dict[str, Any] | None = Field(None, description=IGNORED_CACHE)


class ToolChoice(StrictModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class OutputFormat(StrictModel):
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")


class OutputConfig(StrictModel):
    format: OutputFormat | None = Field(None, description="Structured output: the text follows "
                                        "this JSON schema.")
    effort: Any = Field(None, description=NOT_SUPPORTED)


class MessagesRequest(StrictModel):
    model: str = Field(description="The served model name or an alias.")
    messages: Annotated[list[Message], Field(min_length=1)]
    max_tokens: int = Field(ge=1, le=MAX_INT32)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[NonEmptyStr] | None = None
    stream: bool = False
    temperature: float = Field(1.0, ge=0.0, le=1.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=MAX_INT32, description="-1 (off) or >= 1.")
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    output_config: OutputConfig | None = None
    # Ignored by design.
    metadata: dict[str, Any] | None = Field(None, description="Ignored (informational).")
    service_tier: str | None = Field(None, description="Ignored: one tier.")
    cache_control: dict[str, Any] | None = Field(None, description=IGNORED_CACHE)
    speed: str | None = Field(None, description="Ignored: one speed.")
    inference_geo: str | None = Field(None, description="Ignored: one place.")
    # Refused unless null (or the value that asks for nothing).
    thinking: Any = Field(None, description=NOT_SUPPORTED + ' ({"type": "disabled"} passes)')
    container: Any = Field(None, description=NOT_SUPPORTED)
    mcp_servers: Any = Field(None, description=NOT_SUPPORTED)
    context_management: Any = Field(None, description=NOT_SUPPORTED)

    def counted(self) -> list[Counted]:
        return [Counted(STOP_STRINGS, "stop_sequences", len(self.stop_sequences or [])),
                Counted(TOOLS, "tools", len(self.tools or [])),
                Counted(MESSAGES, "messages", len(self.messages))]


class CountTokensRequest(MessagesRequest):
    """The body of POST /v1/messages/count_tokens: a Messages request without ``max_tokens``
    (the other fields are those of /v1/messages; the sampling ones do not change the count)."""

    max_tokens: int = Field(1, ge=1, le=MAX_INT32, description="Not needed; unused.")
