"""Speculative decoding: draft tokens proposed for a request, checked by one forward.

Not the overlapped loop's "speculative step" (``MSTAR_MAX_CONSECUTIVE_SPEC_STEPS``), which is
overlap scheduling. ``ngram`` proposes (``mstar.engine.speculative.ngram``), the scheduler gives a
speculating request a row of 1 + k tokens, the sampler samples at every one of its positions and
``accept`` keeps the longest run that matches the drafts plus one token
(``mstar.engine.speculative.verify``). ``Speculation`` holds the knobs, decides who speculates
and counts (``mstar.engine.speculative.speculation``).
"""
