"""Per-request sampling parameters: a typed struct that crosses processes as is (msgspec).

Validated at construction and again when decoded off the wire, so a bad value is a ValueError
naming the field wherever it enters.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

MAX_LOGPROBS = 20
MAX_PENALTY = 2.0  # presence/frequency penalties: OpenAI's range, -2 .. 2
MAX_LOGIT_BIAS = 100.0  # logit_bias values: OpenAI's range, -100 .. 100

StructuredKind = Literal["json_object", "json_schema", "regex", "choice", "grammar"]
# classify: the classifier head's logits at the last token (mstar.engine.runner.classify_head)
Pooling = Literal["auto", "last", "mean", "classify"]


class StructuredOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A constraint on the output's text, compiled to a grammar in the engine (xgrammar).

    ``spec`` is the JSON schema as JSON text (json_schema), the regex (regex) or the EBNF grammar
    (grammar); it is empty for json_object (any JSON object) and choice (one of ``choices``).
    """

    kind: StructuredKind
    spec: str = ""
    choices: list[str] = []

    def __post_init__(self) -> None:
        if self.kind == "json_schema":
            try:
                json.loads(self.spec)
            except ValueError as exc:
                raise ValueError(f"invalid StructuredOutput.spec: not JSON ({exc})") from None
        elif self.kind in ("regex", "grammar") and not self.spec:
            raise ValueError(f"invalid StructuredOutput.spec: empty {self.kind}")
        if self.kind == "choice" and not (self.choices and all(
                isinstance(c, str) and c for c in self.choices)):
            raise ValueError("invalid StructuredOutput.choices: must be non-empty strings")


class SamplingParams(msgspec.Struct, kw_only=True):
    """How to pick tokens and when to stop; temperature 0 means greedy."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = {}  # token id -> added to its logit before sampling
    min_tokens: int = 0  # EOS and stop_token_ids are masked until this many tokens are out
    structured_output: StructuredOutput | None = None
    # An embedding request: prefill only, it returns its prompt's pooled final hidden state
    # (RequestOutput.embedding) instead of tokens; auto = the engine's rule (docs/openai_api.rst).
    pooling: Pooling | None = None
    # A LoRA adapter's name (MSTAR_LORA_MODULES or loaded at run time); None = the base model.
    lora: str | None = None
    # Qwen3-Omni's thinker: hand out the rows its talker reads (RequestOutput.thinker_rows):
    # each generated token's input embedding, the prompt's media positions' hidden states.
    thinker_rows: bool = False
    # Speak the reply too (a model whose graph has an audio-out walk, e.g. Qwen3-Omni: thinker ->
    # talker -> code2wav), in this voice; the outputs then carry ``new_audio``. None: text only.
    speaker: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == 0:
            self.top_k = -1
        self._validate()

    def _validate(self) -> None:
        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"invalid SamplingParams.{name}={getattr(self, name)!r}: {why}")

        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise bad("max_tokens", "must be an integer >= 1")
        if not _is_num(self.temperature) or self.temperature < 0:
            raise bad("temperature", "must be a number >= 0 (0 = greedy)")
        if not _is_num(self.top_p) or not 0 < self.top_p <= 1:
            raise bad("top_p", "must be in (0, 1]")
        if not _is_int(self.top_k) or (self.top_k != -1 and self.top_k < 1):
            raise bad("top_k", "must be -1 (disabled) or >= 1")
        if not _is_num(self.min_p) or not 0 <= self.min_p <= 1:
            raise bad("min_p", "must be in [0, 1]")
        if not _is_num(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise bad("repetition_penalty", "must be > 0")
        if self.seed is not None and not _is_int(self.seed):
            raise bad("seed", "must be an integer or None")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise bad("stop", "must be a list of non-empty strings")
        if not all(_is_int(t) and t >= 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "must be a list of non-negative integers")
        if not isinstance(self.ignore_eos, bool):
            raise bad("ignore_eos", "must be a boolean")
        if self.logprobs is not None and (
            not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS
        ):
            raise bad("logprobs", f"must be None or an integer in [0, {MAX_LOGPROBS}]")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_num(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise bad(name, f"must be a number in [-{MAX_PENALTY:g}, {MAX_PENALTY:g}]")
        if not all(_is_int(t) and t >= 0 and _is_num(b) and -MAX_LOGIT_BIAS <= b <= MAX_LOGIT_BIAS
                   for t, b in self.logit_bias.items()):
            raise bad("logit_bias", "must map token ids >= 0 to numbers in "
                      f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_tokens:
            raise bad("min_tokens", "must be an integer in [0, max_tokens]")
        if self.pooling not in (None, "auto", "last", "mean", "classify"):
            raise bad("pooling", "must be None, 'auto', 'last', 'mean' or 'classify'")
        if self.lora is not None and not (isinstance(self.lora, str) and self.lora):
            raise bad("lora", "must be None or an adapter's name")
        if not isinstance(self.thinker_rows, bool):
            raise bad("thinker_rows", "must be a boolean")
        if self.pooling is not None and self.structured_output is not None:
            raise bad("pooling", "an embedding request generates nothing to constrain")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
