"""Where a prefill chunk may end around images: the encoder budget and whole image runs."""

from __future__ import annotations

from mstar.engine.request.sequence import Sequence


def encoder_cut(seq: Sequence, start: int, n: int, budget: int, fresh: bool) -> tuple[int, int]:
    """(tokens to run, encoder tokens they take) for ``n`` tokens of ``seq`` from ``start``.

    Each image whose placeholder run starts in the chunk is encoded in this step; the chunk stops
    before the first one the step's encoder ``budget`` cannot hold. ``fresh`` (nothing encoded
    in the step yet): an image larger than the whole budget still runs, alone.
    """
    used = 0
    for image in seq.images:
        if start <= image.offset < start + n:
            if used + image.num_embeds > budget and not (fresh and used == 0):
                return image.offset - start, used
            used += image.num_embeds
    return n, used


def image_run_cut(seq: Sequence, start: int, n: int) -> int:
    """``n`` or fewer tokens of ``seq`` from ``start``, so that the chunk does not end inside an
    image's placeholder run: for models whose image tokens attend to each other both ways
    (Gemma 3), a token cannot see keys that a later chunk computes. A chunk may start inside a
    run (after a prefix-cache hit): the earlier tokens of the run are already computed."""
    for image in seq.images:
        if image.offset < start + n < image.end:
            return max(image.offset - start, 0)
    return n
