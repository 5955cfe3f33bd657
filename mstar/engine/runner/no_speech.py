"""Whisper's no-speech probability, as transformers' ``WhisperNoSpeechDetection`` computes it: the
softmax of the raw logits (before any logits rule) at the position of <|startoftranscript|> in
the decoder prompt, taken at <|nospeech|> (``whisper_units.no_speech_id``). That position is past
a previous-text prompt (``<|startofprev|> ... <|startoftranscript|>``) when one is given.

Computed in the step whose row covers the position (the prompt's first chunk, or the chunk that
holds it under chunked prefill; again after a preemption, with the same value), one extra row
through the LM head. The runner reports it by request number (``RunnerOutput.no_speech``); the
engine keeps it on the request and sends it with the request's first token. A position served
from the prefix cache is not computed again: that request reports none (the same clip and the
same previous text of at least a block's tokens, transcribed twice).

Owned by the model runner's thread, like the kept cross-attention states.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mstar.engine.schedule.scheduler_output import SchedulerOutput


class NoSpeech:
    def __init__(self, start: int, no_speech: int) -> None:
        """``start``: <|startoftranscript|>; ``no_speech``: <|nospeech|>."""
        self.start = start
        self.no_speech = no_speech
        self.at: dict[int, int] = {}  # seq_no -> its prompt's <|startoftranscript|> position

    def step(self, out: SchedulerOutput, hidden: torch.Tensor,
             compute_logits: Callable[[torch.Tensor], torch.Tensor]) -> dict[int, float]:
        """Apply the step's diffs, then the probability of each row that covers its request's
        <|startoftranscript|>: {seq_no: probability}. ``hidden``: the step's final hidden
        states, the rows' tokens in row order."""
        for seq_no in out.removed:
            self.at.pop(seq_no, None)
        for req in out.new:
            prompt = req.token_ids[:req.num_prompt_tokens]
            if self.start in prompt:  # else not a transcription prompt: nothing to report
                self.at[req.seq_no] = prompt.index(self.start)
        seq_nos, rows, first = [], [], 0
        for row in out.rows:
            position = self.at.get(row.seq_no)
            if position is not None and row.start <= position < row.end:
                seq_nos.append(row.seq_no)
                rows.append(first + position - row.start)
            first += row.num_tokens
        if not rows:
            return {}
        logits = compute_logits(hidden[torch.tensor(rows, device=hidden.device)])
        probs = logits.float().softmax(dim=-1)[:, self.no_speech]
        return dict(zip(seq_nos, probs.tolist(), strict=True))
