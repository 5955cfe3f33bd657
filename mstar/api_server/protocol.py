"""Request bodies of the OpenAI-compatible and native endpoints (pydantic, validated at the edge).

Unknown fields are ignored, as OpenAI clients send many we do not use. Sampling defaults follow
OpenAI (temperature 1.0 when absent).

Every number is range-checked here, so whatever passes can be encoded and run by the engine: a
value out of range is a 400 naming the field, never a failure after part of a request was sent.
``seed`` takes 0 .. 2**64-1 (what ``torch.Generator.manual_seed`` and msgpack take); choice ``i``
of an ``n > 1`` request uses ``(seed + i) mod 2**64``. Token counts and ``top_k`` stop at 2**31-1;
infinities and NaN are refused.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mstar.api_server.tools.schema import AssistantToolCall, ChatTool, ToolChoice

SEED_LIMIT = 2**64  # seeds are 0 .. SEED_LIMIT - 1
MAX_INT32 = 2**31 - 1


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=MAX_INT32)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    seed: int | None = Field(None, ge=0, le=SEED_LIMIT - 1)
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=128)
    repetition_penalty: float = Field(1.0, gt=0.0)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                     mode="before")
    @classmethod
    def _null_is_default(cls, value: Any, info: Any) -> Any:
        # OpenAI clients may send explicit nulls: treat them as "absent".
        return cls.model_fields[info.field_name].default if value is None else value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[AssistantToolCall] | None = None  # assistant: the calls it made
    tool_call_id: str | None = None  # tool: the call this result answers

    def text(self) -> str:
        """The message text; list content keeps its text parts (images etc. are unsupported)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[ChatTool] | None = None  # see mstar/api_server/tools/
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    prompt: str | list[int]
    logprobs: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(16, ge=1, le=MAX_INT32)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def num_logprobs(self) -> int | None:
        return self.logprobs


class GenerateRequest(CompletionRequest):
    """Native endpoint: streams NDJSON lines unless stream is false."""

    stream: bool = True
