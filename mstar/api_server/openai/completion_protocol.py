"""The bodies of POST /v1/completions and the native POST /generate."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag

from mstar.api_server.openai.protocol import MAX_INT32, SamplingFields, TokenId
from mstar.api_server.validation.request_rules import MAX_PROMPTS

TokenIds = Annotated[list[TokenId], Field(min_length=1)]


def prompt_form(value: Any) -> str | None:
    """Which form a prompt takes, told by its first item (so an error names the bad item)."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    first = value[0] if value else 0
    return {str: "texts", list: "id_lists"}.get(type(first), "ids")


Prompt = Annotated[
    Annotated[str, Tag("text")] | Annotated[TokenIds, Tag("ids")]
    | Annotated[list[str], Field(min_length=1, max_length=MAX_PROMPTS), Tag("texts")]
    | Annotated[list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS), Tag("id_lists")],
    Discriminator(prompt_form)]


class PromptFields(SamplingFields):
    prompt: Prompt = Field(description="A string, a list of strings, a list of token ids or a "
                           "list of token-id lists (one choice per prompt and n).")
    logprobs: int | None = Field(None, ge=0, le=20)
    max_tokens: int | None = Field(16, ge=1, le=MAX_INT32)

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def num_logprobs(self) -> int | None:
        return self.logprobs

    def prompts(self) -> list[str | list[int]]:
        """Each prompt of the batch: a string or a list of token ids."""
        prompt = self.prompt
        if isinstance(prompt, str) or isinstance(prompt[0], int):
            return [prompt]
        return list(prompt)


class CompletionRequest(PromptFields):
    echo: bool = Field(False, description="Return the prompt's text before the completion.")
    best_of: Any = Field(None, description="Not supported: a 400 unless null or 1.")
    suffix: Any = Field(None, description="Not supported: a 400 unless null or empty.")


class GenerateRequest(PromptFields):
    """Native endpoint: streams NDJSON lines unless stream is false."""

    stream: bool = True
