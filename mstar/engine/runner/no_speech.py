"""Whisper's no-speech probability, as transformers' ``WhisperNoSpeechDetection`` computes it: the
softmax of the raw logits (before any logits rule) at the position of <|startoftranscript|> in
the decoder prompt, taken at <|nospeech|> (``whisper_units.no_speech_id``). That position is past
a previous-text prompt (``<|startofprev|> ... <|startoftranscript|>``) when one is given.

Computed in the step whose row covers the position (the prompt's first chunk, or the chunk that
holds it under chunked prefill; again after a preemption, with the same value), one extra row
through the LM head. The runner reports it by request number (``RunnerOutput.no_speech``); the
engine keeps it on the request and sends it with the request's first token.

A position served from the prefix cache is not run again (the same clip with the same previous
text of at least a KV block's tokens, transcribed again): the value is then the one computed for
that clip and prompt before, kept by (the parts' content hashes, the prompt up to the position)
for the last ``MEMO_ENTRIES`` computed (a float each). One evicted from there is not reported.

Owned by the model runner's thread, like the kept cross-attention states.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mstar.engine.schedule.scheduler_output import NewRequest, SchedulerOutput

MEMO_ENTRIES = 4096  # probabilities kept for prompts whose position the prefix cache serves

Key = tuple[tuple[str, ...], tuple[int, ...]]  # (the parts' content hashes, prompt to position)


@dataclass(frozen=True)
class _Pending:
    position: int  # of <|startoftranscript|> in the prompt
    key: Key


class NoSpeech:
    def __init__(self, start: int, no_speech: int) -> None:
        """``start``: <|startoftranscript|>; ``no_speech``: <|nospeech|>."""
        self.start = start
        self.no_speech = no_speech
        self.pending: dict[int, _Pending] = {}  # seq_no -> what it still has to report
        self.memo: OrderedDict[Key, float] = OrderedDict()

    def step(self, out: SchedulerOutput, hidden: torch.Tensor,
             compute_logits: Callable[[torch.Tensor], torch.Tensor]) -> dict[int, float]:
        """Apply the step's diffs, then the probability of each request whose
        <|startoftranscript|> the step's rows run (or, served from the prefix cache, pass):
        {seq_no: probability}. ``hidden``: the step's final hidden states, in row order."""
        for seq_no in out.removed:
            self.pending.pop(seq_no, None)
        for req in out.new:
            self._add(req)
        found: dict[int, float] = {}
        seq_nos, rows, first = [], [], 0
        for row in out.rows:
            wait = self.pending.get(row.seq_no)
            if wait is not None and row.start <= wait.position < row.end:
                seq_nos.append(row.seq_no)
                rows.append(first + wait.position - row.start)
            elif wait is not None and row.start > wait.position:  # from the prefix cache
                del self.pending[row.seq_no]
                if wait.key in self.memo:
                    found[row.seq_no] = self.memo[wait.key]
            first += row.num_tokens
        if rows:
            logits = compute_logits(hidden[torch.tensor(rows, device=hidden.device)])
            probs = logits.float().softmax(dim=-1)[:, self.no_speech].tolist()
            for seq_no, prob in zip(seq_nos, probs, strict=True):
                self._keep(self.pending.pop(seq_no).key, prob)
                found[seq_no] = prob
        return found

    def _add(self, req: NewRequest) -> None:
        prompt = req.token_ids[:req.num_prompt_tokens]
        if self.start not in prompt:  # not a transcription prompt: nothing to report
            return
        position = prompt.index(self.start)
        key = (tuple(p.content_hash for p in req.parts), tuple(prompt[:position + 1]))
        self.pending[req.seq_no] = _Pending(position, key)

    def _keep(self, key: Key, prob: float) -> None:
        self.memo[key] = prob
        self.memo.move_to_end(key)
        if len(self.memo) > MEMO_ENTRIES:
            self.memo.popitem(last=False)
