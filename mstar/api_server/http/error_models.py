"""The error body every route answers with, as the published schema describes it (OpenAI's
shape; ``errors.error_body`` builds it)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = Field(description="Dotted path of the field to blame, if one is.")
    code: str | None = Field(description="model_not_found for an unknown model, else null.")


class ErrorResponse(BaseModel):
    error: ErrorDetail
