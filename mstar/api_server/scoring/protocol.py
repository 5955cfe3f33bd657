"""The bodies of POST /v1/rerank (Cohere's and Jina's shape, as vLLM and llama.cpp serve it),
/v1/score (vLLM's) and /v1/classify (vLLM's). Fields those APIs define that mstar does not offer
are declared (``Any``) so that they are known, and refused with a 400 naming them
(``validation.scoring_rows``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from mstar.api_server.http.bounds import EMBEDDING_INPUTS, Counted
from mstar.api_server.openai.protocol import MAX_INT32, StrictModel

NOT_SUPPORTED = "Not supported: a 400 unless null."
Texts = Annotated[list[str], Field(min_length=1)]


class DocumentObject(StrictModel):
    """A document given as an object (Cohere v1, Jina): its ``text``."""

    text: str


class RerankRequest(StrictModel):
    model: str | None = None
    query: str = Field(description="What the documents are ranked against.")
    documents: Annotated[list[str | DocumentObject], Field(min_length=1)] = Field(
        description="Strings, or objects with 'text'.")
    top_n: int | None = Field(None, ge=1, le=MAX_INT32, description="Return the best n; "
                              "absent: every document.")
    return_documents: bool = Field(True, description="Each result holds its document's text.")
    truncate_prompt_tokens: Any = Field(None, description=NOT_SUPPORTED)
    max_tokens_per_doc: Any = Field(None, description=NOT_SUPPORTED + " (Cohere v2)")
    max_chunks_per_doc: Any = Field(None, description=NOT_SUPPORTED + " (Cohere v1)")
    rank_fields: Any = Field(None, description=NOT_SUPPORTED + " (Cohere v1)")
    user: str | None = Field(None, description="Accepted and ignored.")

    def counted(self) -> list[Counted]:
        return [Counted(EMBEDDING_INPUTS, "documents", len(self.documents))]

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


class ScoreRequest(StrictModel):
    model: str | None = None
    text_1: str | Texts = Field(description="The queries: one, or one per text_2 entry.")
    text_2: str | Texts = Field(description="The documents, each scored against its query.")
    truncate_prompt_tokens: Any = Field(None, description=NOT_SUPPORTED)
    user: str | None = Field(None, description="Accepted and ignored.")

    def counted(self) -> list[Counted]:
        return [Counted(EMBEDDING_INPUTS, "text_2", len(_listed(self.text_2)))]

    def queries(self) -> list[str]:
        return _listed(self.text_1)

    def documents(self) -> list[str]:
        return _listed(self.text_2)


class ClassifyRequest(StrictModel):
    model: str | None = None
    input: str | Texts = Field(description="A string or a list of strings: one result each.")
    truncate_prompt_tokens: Any = Field(None, description=NOT_SUPPORTED)
    user: str | None = Field(None, description="Accepted and ignored.")

    def counted(self) -> list[Counted]:
        return [Counted(EMBEDDING_INPUTS, "input", len(self.inputs()))]

    def inputs(self) -> list[str]:
        return _listed(self.input)


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
