"""The body and the answer of POST /v1/embeddings (OpenAI's shape)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from mstar.api_server.http.bounds import EMBEDDING_INPUTS, Counted
from mstar.api_server.openai.completion_protocol import TokenIds, prompt_form
from mstar.api_server.openai.protocol import StrictModel

EmbeddingInput = Annotated[
    Annotated[str, Tag("text")] | Annotated[TokenIds, Tag("ids")]
    | Annotated[list[str], Field(min_length=1), Tag("texts")]
    | Annotated[list[TokenIds], Field(min_length=1), Tag("id_lists")],
    Discriminator(prompt_form)]


class EmbeddingRequest(StrictModel):
    model: str | None = None
    input: EmbeddingInput = Field(description="A string, a list of strings, a list of token ids "
                                  "or a list of token-id lists: one vector each.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: a list of numbers; base64: the little-endian float32 bytes.")
    dimensions: Any = Field(None, description="Not supported: a 400 unless null.")
    user: str | None = Field(None, description="Accepted and ignored.")

    def counted(self) -> list[Counted]:
        return [Counted(EMBEDDING_INPUTS, "input", len(self.inputs()))]

    def inputs(self) -> list[str | list[int]]:
        """Each input of the batch: a string or a list of token ids."""
        value = self.input
        if isinstance(value, str) or isinstance(value[0], int):
            return [value]
        return list(value)


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str = Field(description="A unit vector (L2 norm 1); base64 when "
                                         "encoding_format is base64.")


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
