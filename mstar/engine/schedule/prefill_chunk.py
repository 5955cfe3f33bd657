"""How many of a request's pending tokens run in a step: the one rule for generation and pooling
prompts (MSTAR_MAX_PREFILL_CHUNK_TOKENS).

A prompt is prefilled in chunks of at most ``cap`` tokens, within what the step's budget has
left, so a long one (an 8192-token embedding input, say) shares the worker: the requests beside
it keep decoding, and waiting ones are admitted between its chunks, instead of all of them
waiting for its whole prompt in one step. A decode has one token and is never cut. For models
whose image tokens attend to each other both ways, the cap never ends a chunk inside an image's
run (the run then goes whole, as far as the budget allows; ``image_run_cut`` does the rest).
"""

from __future__ import annotations

from mstar.engine.request.sequence import Sequence
from mstar.settings.knobs.engine import PREFILL_CHUNK_ON_CPU


def prefill_cap(setting: int | str, device_type: str, budget: int) -> int:
    """MSTAR_MAX_PREFILL_CHUNK_TOKENS as a number: ``auto`` caps on CPU only."""
    if setting != "auto":
        return int(setting)
    return PREFILL_CHUNK_ON_CPU if device_type == "cpu" else budget


def chunk(seq: Sequence, start: int, budget: int, cap: int, whole_image_runs: bool) -> int:
    """Tokens of ``seq`` to run from ``start`` in a step with ``budget`` tokens left."""
    n = min(len(seq) - start, budget)
    if n <= cap:
        return n
    if whole_image_runs:
        for image in seq.images:  # the cap does not split a run that must run whole
            if image.offset < start + cap < image.end:
                return min(image.end - start, n)
    return cap
