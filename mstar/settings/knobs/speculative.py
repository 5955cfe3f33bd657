"""Speculative decoding (not the overlapped loop)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from mstar.settings.knobs.field import _speculative


class SpeculativeKnobs(BaseModel):
    """Speculative decoding (proposed tokens verified in one forward): not the overlapped loop's
    continuation (MSTAR_MAX_CONSECUTIVE_SPEC_STEPS, the reference system's "speculative step"),
    which is overlap scheduling."""

    speculative_method: Literal["none", "ngram", "draft", "mtp"] = _speculative(
        "none", "Speculative decoding: how draft tokens are proposed before one forward verifies "
        "them all. ngram = prompt lookup over the request's own prompt and output. draft = a "
        "small model of the same tokenizer (MSTAR_SPECULATIVE_DRAFT_MODEL), run by the same "
        "engine with its own KV cache. mtp = the model's own multi-token-prediction head "
        "(Qwen3.5 checkpoints that ship it; one draft token per step). A method that cannot run "
        "with the model is a warning, then none (an error in strict mode). Runs in the "
        "serial loop only: an overlap cap above 0 (MSTAR_MAX_CONSECUTIVE_SPEC_STEPS) turns it off "
        "with a warning. Greedy output is token for token plain decoding's in float32. In "
        "bfloat16 and float16 (MSTAR_DTYPE=auto picks bfloat16 on CUDA and on CPUs with native "
        "or kernel bf16) a verify forward computes several positions at once and rounds "
        "differently from a one-token step, so output may leave plain decoding's where its two "
        "best tokens are within rounding of each other (a near tie), as plain 16-bit decoding "
        "may between batch sizes. See docs/engine.rst.")
    num_speculative_tokens: int = _speculative(
        4, "Most draft tokens proposed for a request in one step.", unit="tokens", ge=1, le=64)
    ngram_min_n: int = _speculative(
        2, "ngram proposer: the shortest suffix of a request's tokens looked up in its earlier "
        "tokens.", unit="tokens", ge=1, le=64)
    ngram_max_n: int = _speculative(
        4, "ngram proposer: the longest suffix looked up (tried first).", unit="tokens", ge=1,
        le=64)
    speculative_draft_model: str | None = _speculative(
        None, "draft proposer: the draft model, a local HF-format directory or builtin (the "
        "built-in model), with the target's tokenizer (checked at start: another vocabulary, or "
        "none set, falls back to none with a warning; an error in strict mode).")
    speculative_min_acceptance: float = _speculative(
        0.3, "A request stops speculating once its accepted share of the draft tokens proposed "
        "for it falls below this (checked after MSTAR_NUM_SPECULATIVE_TOKENS * 4 proposed). 0 "
        "never stops.", ge=0.0, le=1.0)
    speculative_gate: bool = _speculative(
        True, "Verify only the drafts the verify gate expects to raise the step's output rate, "
        "from this machine's measured step costs and each request's acceptance (on), or every "
        "proposed draft (off: for acceptance studies, and for tests whose output must not "
        "depend on the machine's step timings). It changes only which drafts are verified, so "
        "speculative decoding's output promise (MSTAR_SPECULATIVE_METHOD) holds either way; "
        "the speed differs. See docs/engine.rst.")
