"""A speech request's finish rule in the engine (CSM): it ends after its end frame (every code
but the last is the codebook end id, ``csm_frames.frame_ends``) as transformers ends it, or at
``max_tokens`` frames. Stop token ids and EOS do not apply: a frame's token is its code 0, a
Mimi code, not a text token.

The engine asks it after appending each token, the token's frame already appended (its
``Sequence``: ``frames``, ``num_output_tokens``, ``params.max_tokens``)."""

from __future__ import annotations

from mstar.models.speech.csm_frames import frame_ends


class FrameStop:
    def __init__(self, end_code: int, speculating: bool) -> None:
        if speculating:  # a row verifying drafts would need a frame per draft
            raise ValueError("MSTAR_SPECULATIVE_METHOD: speech models (CSM) run without "
                             "speculative decoding; set it to none")
        self.end_code = end_code

    @staticmethod
    def text_rule(params) -> str | None:
        """The request field (``SamplingParams``) that is a text rule a speech request cannot
        take, or None: stop token ids and ``min_tokens`` (which masks them and EOS) would stop
        or mask Mimi codes, a structured output constrains text."""
        if params.stop_token_ids:
            return "stop_token_ids"
        if params.min_tokens:
            return "min_tokens"
        return "structured_output" if params.structured_output is not None else None

    def reason(self, seq, token: int) -> str | None:
        if frame_ends(seq.frames[-1], self.end_code):
            return "stop"
        return "length" if seq.num_output_tokens >= seq.params.max_tokens else None
