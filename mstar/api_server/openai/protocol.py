"""The request fields every generation endpoint shares (pydantic, validated at the edge).

Types are strict: no string or bool becomes a number, and no float becomes an integer. Every
number is range-checked here, so whatever passes can be encoded and run by the engine: a value out
of range is a 400 naming the field, never a failure after part of a request was sent. ``seed``
takes 0 .. 2**64-1 (what ``torch.Generator.manual_seed`` and msgpack take); choice ``i`` of an
``n > 1`` request uses ``(seed + i) mod 2**64``. Token counts and ``top_k`` stop at 2**31-1;
infinities and NaN are refused. An explicit ``null`` means "absent" (OpenAI clients send them).

Fields no model declares land in ``model_extra``; ``request_rules`` decides what they get
(MSTAR_UNKNOWN_REQUEST_FIELDS). What each field does is in ``field_rows``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mstar.api_server.context.keep_alive import PATTERN as KEEP_ALIVE
from mstar.api_server.http.bounds import LOGIT_BIAS, STOP_STRINGS, Counted
from mstar.engine.request.limits import SEED_LIMIT
from mstar.engine.request.sampling_params import MAX_LOGIT_BIAS, MAX_PENALTY

MAX_INT32 = 2**31 - 1

NonEmptyStr = Annotated[str, Field(min_length=1)]
TokenId = Annotated[int, Field(ge=0, le=MAX_INT32)]
Bias = Annotated[float, Field(ge=-MAX_LOGIT_BIAS, le=MAX_LOGIT_BIAS)]
Penalty = Annotated[float, Field(ge=-MAX_PENALTY, le=MAX_PENALTY)]


class StrictModel(BaseModel):
    """Strict types, finite numbers, unknown fields kept aside, ``null`` as absent."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            names = {f.alias or name for name, f in cls.model_fields.items()}
            return {k: v for k, v in data.items() if not (v is None and k in names)}
        return data

    def counted(self) -> list[Counted]:
        """The entries this request's lists hold, each under its limit (``http.bounds``): the
        gate checks them before anything walks them. A request with a bounded list says so."""
        return []


class StreamOptions(StrictModel):
    include_usage: bool = False
    include_obfuscation: bool = Field(False, description="Ignored: chunks are never padded.")


class JSONSchemaFormat(StrictModel):
    name: str = Field("response", max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] | bool | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(StrictModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None


class SamplingFields(StrictModel):
    """Fields of every generation endpoint (OpenAI's and vLLM's extras)."""

    model: str | None = Field(None, description="The served model name or an alias.")
    max_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=MAX_INT32, description="Extra: -1 (off) or >= 1.")
    min_p: float = Field(0.0, ge=0.0, le=1.0, description="Extra.")
    seed: int | None = Field(None, ge=0, le=SEED_LIMIT - 1)
    stop: NonEmptyStr | list[NonEmptyStr] | None = None
    n: int = Field(1, ge=1, le=128)
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    repetition_penalty: float = Field(1.0, gt=0.0, le=1e6, description="Extra: 1 is off.")
    logit_bias: dict[str, Bias] | None = Field(
        None, description="Token id (as a string) -> bias in -100 .. 100.")
    ignore_eos: bool = Field(False, description="Extra: keep generating past end-of-sequence.")
    min_tokens: int = Field(0, ge=0, le=MAX_INT32, description="Extra: <= max_tokens.")
    stop_token_ids: list[TokenId] | None = Field(None, description="Extra.")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, description="Ignored (informational).")
    response_format: ResponseFormat | None = None
    guided_json: dict[str, Any] | str | None = Field(
        None, description="Extra: a JSON schema the output follows.")
    guided_regex: NonEmptyStr | None = Field(None, description="Extra: a regex to match.")
    guided_choice: list[NonEmptyStr] | None = Field(
        None, min_length=1, description="Extra: the output is one of these.")
    guided_grammar: NonEmptyStr | None = Field(None, description="Extra: an EBNF grammar.")
    keep_alive: float | Annotated[str, Field(pattern=KEEP_ALIVE)] | None = Field(
        None, description="Extension (Ollama's): with several models (MSTAR_MODELS), how long "
        "this request's model stays loaded once idle: seconds, or a duration such as '5m'; "
        "negative: never unloaded. One model: accepted and ignored.")

    def counted(self) -> list[Counted]:
        return [Counted(STOP_STRINGS, "stop", len(self.stop_list())),
                Counted(LOGIT_BIAS, "logit_bias", len(self.logit_bias or {}))]

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage
