"""The body of POST /v1/chat/completions.

Fields OpenAI defines that mstar does not offer are declared (``Any``) so that they are known,
and refused by ``request_rules`` with a 400 naming them; see ``field_rows`` for each one.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mstar.api_server.http.bounds import MESSAGES, TOOLS, Counted
from mstar.api_server.openai.protocol import MAX_INT32, NonEmptyStr, SamplingFields, StrictModel
from mstar.api_server.tools.schema import AssistantToolCall, ChatTool, ToolChoice

NOT_SUPPORTED = "Not supported: a 400 unless null."


class ImageURL(StrictModel):
    url: NonEmptyStr = Field(description="A data: URL (base64 PNG, JPEG or WebP), or an http(s) "
                             "URL of a host in MSTAR_ALLOWED_MEDIA_DOMAINS.")
    detail: str | None = Field(None, description="Only 'auto': the model's processor sets the "
                               "resolution.")


class InputAudio(StrictModel):
    data: NonEmptyStr = Field(description="The audio file, base64: WAV, FLAC, MP3 or OGG "
                              "(Vorbis, Opus), within MSTAR_MAX_AUDIO_BYTES and "
                              "MSTAR_MAX_AUDIO_SECONDS.")
    format: NonEmptyStr = Field(description="wav, mp3, flac, ogg or opus: what ``data`` is (a "
                                "mismatch is a 400).")


class ContentPart(StrictModel):
    """One part of a message's content: ``text``, ``image_url`` for a model that takes images,
    ``input_audio`` for one that takes audio (other types are a 400)."""

    type: NonEmptyStr
    text: str | None = None
    image_url: ImageURL | None = None
    input_audio: InputAudio | None = None


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = None  # assistant: the calls it made
    tool_call_id: str | None = None  # tool: the call this result answers

    def text(self) -> str:
        """The message text: a string, or the text parts joined."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text or "" for part in self.content if part.type == "text")


Modality = Literal["text", "audio"]


class ChatAudioParams(StrictModel):
    voice: NonEmptyStr = Field(description="One of the served model's voices (Qwen3-Omni: "
                               "the keys of talker_config.speaker_id); another is a 400 naming "
                               "audio.voice.")
    format: NonEmptyStr = Field(description="wav, mp3, flac, opus or pcm16 (16-bit "
                                "little-endian mono at the codec's rate); streamed: pcm16 only. "
                                "aac is a 400 naming audio.format (no encoder).")


class ChatTemplateKwargs(StrictModel):
    """Arguments for the chat template; other keys follow MSTAR_UNKNOWN_REQUEST_FIELDS."""

    enable_thinking: bool | None = Field(
        None, description="The template's thinking switch (Qwen3, SmolLM3...); a 400 when the "
        "model's template has none. See docs/reasoning.rst.")


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20, description="Needs logprobs: true.")
    tools: list[ChatTool] | None = None  # tool calling: see mstar/api_server/tools/
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
    # Reasoning models: see mstar/api_server/reasoning/.
    reasoning_effort: ReasoningEffort | None = Field(
        None, description="Mapped to the chat template's reasoning switch; a 400 when it has none.")
    chat_template_kwargs: ChatTemplateKwargs | None = None
    # Ignored by design.
    metadata: dict[str, str] | None = Field(None, description="Ignored: nothing is stored.")
    service_tier: str | None = Field(None, description="Ignored: one tier.")
    safety_identifier: str | None = Field(None, description="Ignored (informational).")
    prompt_cache_key: str | None = Field(None, description="Ignored: prefix caching is automatic.")
    prompt_cache_retention: str | None = Field(None, description="Ignored.")
    # Refused unless null (or the value that asks for nothing).
    store: bool | None = Field(None, description="Nothing is stored: true is a 400.")
    # Audio out (a model whose graph emits audio): see openai.chat_audio.
    modalities: list[Modality] | None = Field(
        None, min_length=1, description='["text"] (the default) or ["text", "audio"]: the reply '
        "spoken too, with audio; audio out from a model whose graph emits no audio is a 400.")
    audio: ChatAudioParams | None = Field(
        None, description='The reply\'s voice and format; needs "audio" in modalities (and it '
        "needs this).")
    functions: Any = Field(None, description=NOT_SUPPORTED + " Use tools.")
    function_call: Any = Field(None, description=NOT_SUPPORTED + " Use tool_choice.")
    prediction: Any = Field(None, description=NOT_SUPPORTED)
    verbosity: Any = Field(None, description=NOT_SUPPORTED)
    web_search_options: Any = Field(None, description=NOT_SUPPORTED)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def counted(self) -> list[Counted]:
        return [*super().counted(), Counted(TOOLS, "tools", len(self.tools or [])),
                Counted(MESSAGES, "messages", len(self.messages))]

    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None
