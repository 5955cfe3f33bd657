"""What the sampler remembers about one request's output: token counts, length, grammar matcher.

Why not read ``Sequence.token_ids``: in the overlapped loop (``mstar.engine.step_loop``) step N+1
is launched with N's sampled tokens before N is postprocessed, and it samples on the forward
thread while the main thread appends N's tokens to the sequence. What the sequence holds when N+1
samples is a race. So the sampler keeps its own record, ``SamplingState``, and is its only writer:
it records each row's token right after sampling it (on the forward thread; in the serial loop, on
the calling thread). Steps sample one after another, in launch order, on that one thread.

Invariant: when a sequence is sampled, its state holds exactly the outputs that precede that
sample, i.e. the sequence's outputs once every step before it is postprocessed. Because:

- every row sampled for an unfinished sequence is appended to it exactly once, by postprocess,
  in the same order as the sampler recorded it; no step that ran is discarded;
- the only rows postprocess drops are those of sequences that finished or were aborted after the
  step was launched (N+1 carries one wasted row for each sequence N finishes). Their state is
  dropped with the sequence and never read again;
- preemption happens only in a fresh ``schedule()``, with no step in flight; recompute keeps the
  outputs, and so does the state; the recompute's last row samples the next token as usual.

A grammar that has terminated (it accepted an end-of-sequence token) is never advanced again: a row
sampled after that is a wasted row of a finished sequence.
"""

from __future__ import annotations

from concurrent.futures import Future

import torch

from mstar.engine.sampling_params import SamplingParams


class SamplingState:
    """Per-request sampler memory (see the module docstring for who may touch it, and when).

    ``prompt_ids``: the prompt's distinct token ids, on the model's device (for
    repetition_penalty), else None.
    ``early_stop_ids``: the ids that end the output (EOS, stop_token_ids), masked until
    ``min_tokens`` tokens are out. ``grammar``: the structured-output ``Constraint`` being compiled
    (a Future), else None.
    """

    def __init__(self, prompt_ids: torch.Tensor | None, early_stop_ids: list[int],
                 grammar: Future | None) -> None:
        self.prompt_ids = prompt_ids
        self.early_stop_ids = early_stop_ids
        self.grammar = grammar
        self.output_counts: dict[int, int] = {}
        self.num_sampled = 0
        self._matcher = None

    @property
    def grammar_ready(self) -> bool:
        """No grammar, or its compilation succeeded (read by the scheduler; Future is safe)."""
        g = self.grammar
        return g is None or (g.done() and g.exception() is None)

    def matcher(self):
        """The xgrammar GrammarMatcher, made on first use (only once the grammar is ready)."""
        if self._matcher is None:
            import xgrammar as xgr

            self._matcher = xgr.GrammarMatcher(self.grammar.result().grammar)
        return self._matcher

    def record(self, token: int) -> None:
        """The sampler picked ``token`` for this request: count it and advance the grammar."""
        self.num_sampled += 1
        self.output_counts[token] = self.output_counts.get(token, 0) + 1
        if self.grammar is not None:
            matcher = self.matcher()
            if not matcher.is_terminated():
                matcher.accept_token(token)


def needs_state(params: SamplingParams) -> bool:
    """Whether sampling this request reads anything about its output so far."""
    return (params.repetition_penalty != 1.0 or params.presence_penalty != 0.0
            or params.frequency_penalty != 0.0 or params.min_tokens > 0
            or params.structured_output is not None)


def new_sampling_state(params: SamplingParams, prompt_token_ids: list[int],
                       eos_token_ids: set[int], vocab_size: int, grammar: Future | None,
                       device: torch.device) -> SamplingState | None:
    """The state for a new request; None when its sampling reads nothing of its output."""
    if not needs_state(params):
        return None
    prompt_ids = None
    if params.repetition_penalty != 1.0:
        prompt_ids = torch.tensor(sorted(set(prompt_token_ids)), dtype=torch.int64,
                                  device=device)
    stops = set(params.stop_token_ids) | eos_token_ids if params.min_tokens else set()
    early_stop_ids = sorted(t for t in stops if t < vocab_size)  # larger ids are never sampled
    return SamplingState(prompt_ids, early_stop_ids, grammar)
