"""Speculative decoding: draft tokens proposed for a request, checked by one forward.

Not the overlapped loop's continuation (``MSTAR_MAX_CONSECUTIVE_SPEC_STEPS``, the reference
system's "speculative step"), which is overlap scheduling. A proposer drafts (``ngram``: prompt
lookup; ``draft_model``: a small model of the same tokenizer on its own paged cache;
``mtp_proposer``: Qwen3.5's MTP head, fed by every forward), the scheduler gives a speculating
request a row of 1 + k tokens, the sampler samples at every one of its positions and ``accept``
keeps the longest run that matches the drafts plus one token
(``mstar.engine.speculative.verify``). ``Speculation`` holds the knobs, decides who speculates
and counts (``mstar.engine.speculative.speculation``), behind the scheduler's one seam
(``drafting``); ``setup`` builds it for an engine.
"""
