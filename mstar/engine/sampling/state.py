"""What sampling keeps for one request beyond its params: the ids ``min_tokens`` masks, and its
structured-output grammar (the compile Future, then the xgrammar matcher).

It lives as long as the request, across preemption (the ``SamplingBatch`` row does not: a
preempted request leaves its slot and is added again, with its outputs, when it resumes). Who
touches what: the engine makes it at ``add_request``; the scheduler reads ``grammar_ready`` (a
Future is thread-safe); the matcher is made and advanced only on the grammar thread
(``mstar.engine.sampling.grammar``), so exactly one thread writes it.
"""

from __future__ import annotations

from concurrent.futures import Future

from mstar.engine.request.sampling_params import SamplingParams


class SamplingState:
    """``early_stop_ids``: the ids that end the output (EOS, stop_token_ids), masked until
    ``min_tokens`` tokens are out. ``grammar``: the structured-output ``Constraint`` being compiled
    (a Future), else None."""

    def __init__(self, early_stop_ids: list[int], grammar: Future | None) -> None:
        self.early_stop_ids = early_stop_ids
        self.grammar = grammar
        self._matcher = None

    @property
    def grammar_ready(self) -> bool:
        """No grammar, or its compilation succeeded (read by the scheduler; Future is safe)."""
        g = self.grammar
        return g is None or (g.done() and g.exception() is None)

    def matcher(self):
        """The xgrammar GrammarMatcher, made on first use (grammar thread only, once ready)."""
        if self._matcher is None:
            import xgrammar as xgr

            self._matcher = xgr.GrammarMatcher(self.grammar.result().grammar)
        return self._matcher


def new_sampling_state(params: SamplingParams, eos_token_ids: set[int], vocab_size: int,
                       grammar: Future | None) -> SamplingState | None:
    """The state for a new request; None when it has neither min_tokens nor a grammar."""
    if not params.min_tokens and grammar is None:
        return None
    stops = set(params.stop_token_ids) | eos_token_ids if params.min_tokens else set()
    early_stop_ids = sorted(t for t in stops if t < vocab_size)  # larger ids are never sampled
    return SamplingState(early_stop_ids, grammar)
