"""Sampling as tensors: a persistent batch of per-row sampling data, keyed by slot.

The contract (``batch.SamplingBatch``; ``sampler.Sampler`` drives it each step):

- A row slot is an integer in ``0 .. max_rows-1`` (``max_rows`` = ``max_num_seqs``). Whoever owns
  the running set assigns slots: a request takes one when it enters the running set and gives it
  back when it leaves (finished, aborted, preempted). The owner is the model runner's persistent
  ``InputBatch`` (``mstar.engine.runner.input_batch``): the slot of a request's row there.
- ``SamplingBatch.add(slot, params, prompt_token_ids, output_token_ids=(), generator=None,
  state=None)`` fills the slot's rows: temperature, top-k, top-p, min-p, the three penalties as
  per-slot tensors; logit_bias as (ids, values) tensors, built once here; min_tokens' early-stop
  ids; the token counts (prompt-presence mask and output counts, started from
  ``output_token_ids``, so a resumed request keeps them). ``generator`` is the request's own
  seeded one (it lives with the request, so preemption does not restart its stream); ``state`` is
  its ``SamplingState`` (min_tokens ids, grammar). ``remove(slot)`` frees the slot.
- Each step: ``Sampler.begin(SamplingStep(slots, removed, added))`` applies the row changes, then
  starts filling the grammar bitmask of the step's constrained rows on the grammar thread;
  ``Sampler.sample(logits, started)`` returns one token per row (row ``i`` of ``logits`` is slot
  ``slots[i]``) and logprobs, and ``SamplingBatch.record`` updates the counts from those tokens.
- Threads: the batch is written by exactly one thread, the one that samples (the forward thread
  in the overlapped loop), and changes are applied in step order. So ``add``/``remove`` are called
  through ``begin``: a step's changes travel with it as values, and a slot freed while an earlier
  step is in flight is refilled only when a later step runs. The matchers are written only by the
  grammar thread (``grammar.GrammarMasks``).
- ``output_token_ids`` given to ``add`` must be the request's outputs as of the step that carries
  the add: true today because rows are added only by a fresh ``schedule()``, with no step in flight.
"""
