"""Whisper's logits rules, as transformers' ``generate`` applies them, in its order:
``begin_suppress_tokens`` at the first generated position, ``suppress_tokens`` everywhere, then,
when the request asks for timestamps (its decoder prompt does not end with <|notimestamps|>),
``WhisperTimeStampLogitsProcessor``'s rules.

Model-level: they come from the model's generation_config.json and apply to every request of a
Whisper model; the runner calls ``apply`` on the step's sampled rows before the sampler, with
each row's prompt length and tokens so far (its persistent-batch row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class RowHistory:
    prompt: list[int]  # the decoder prompt
    generated: list[int]  # the tokens sampled so far


class WhisperRules:
    def __init__(self, gen: dict, vocab_size: int, device: torch.device) -> None:
        def ids(name: str) -> torch.Tensor:
            return torch.tensor([t for t in gen.get(name) or [] if t < vocab_size],
                                dtype=torch.int64, device=device)

        self.suppress = ids("suppress_tokens")
        self.begin_suppress = ids("begin_suppress_tokens")
        self.start = int(gen["decoder_start_token_id"])  # <|startoftranscript|>
        self.no_timestamps = int(gen["no_timestamps_token_id"])
        self.timestamp_begin = self.no_timestamps + 1
        eos = gen.get("eos_token_id")
        self.eos = int(eos[0] if isinstance(eos, list) else eos)
        self.max_initial_timestamp_index = gen.get("max_initial_timestamp_index")

    @classmethod
    def from_model_dir(cls, model_dir: Path, vocab_size: int,
                       device: torch.device) -> WhisperRules:
        gen = json.loads((Path(model_dir) / "generation_config.json").read_text())
        return cls(gen, vocab_size, device)

    def apply(self, logits: torch.Tensor, rows: list[RowHistory]) -> torch.Tensor:
        """``logits`` [rows, vocab] changed in place (and returned)."""
        first = [i for i, r in enumerate(rows) if not r.generated]
        if first and self.begin_suppress.numel():
            logits[torch.tensor(first, device=logits.device)[:, None],
                   self.begin_suppress[None, :]] = NEG_INF
        if self.suppress.numel():
            logits[:, self.suppress] = NEG_INF
        timed = [i for i, r in enumerate(rows) if r.prompt[-1] != self.no_timestamps]
        if timed:
            for i in timed:
                self._timestamps(logits[i], rows[i].generated)
            self._prefer_timestamps(logits, timed)
        return logits

    def _timestamps(self, scores: torch.Tensor, seq: list[int]) -> None:
        """One row's pairing, monotonicity and first-token rules."""
        begin = self.timestamp_begin
        scores[self.no_timestamps] = NEG_INF
        last_ts = len(seq) >= 1 and seq[-1] >= begin
        penultimate_ts = len(seq) < 2 or seq[-2] >= begin
        if last_ts:
            if penultimate_ts:  # a pair just closed: text (or the end) next
                scores[begin:] = NEG_INF
            else:  # a lone timestamp opens a pair: no text before its partner
                scores[: self.eos] = NEG_INF
        stamps = [t for t in seq if t >= begin]
        floor = begin
        if stamps:  # timestamps never go back (and <|0.00|> comes once)
            floor = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
        scores[begin:floor] = NEG_INF
        if not seq:  # the first token is a timestamp, at most max_initial_timestamp_index
            scores[:begin] = NEG_INF
            if self.max_initial_timestamp_index is not None:
                scores[begin + self.max_initial_timestamp_index + 1:] = NEG_INF

    def _prefer_timestamps(self, logits: torch.Tensor, timed: list[int]) -> None:
        """Where the timestamps together outweigh every text token, a timestamp comes next."""
        begin = self.timestamp_begin
        index = torch.tensor(timed, device=logits.device)
        logprobs = torch.log_softmax(logits[index].float(), dim=-1)
        stamp = logprobs[:, begin:].logsumexp(dim=-1)
        text = logprobs[:, :begin].max(dim=-1).values
        for k, i in enumerate(timed):
            if stamp[k] > text[k]:
                logits[i, :begin] = NEG_INF
