"""Where a prefill chunk may end around media parts: the encoder budget of each encoder node and
whole image runs."""

from __future__ import annotations

from mstar.engine.request.sequence import Sequence


def encoder_cut(seq: Sequence, start: int, n: int, left: dict[str, int],
                full: int) -> tuple[int, dict[str, int]]:
    """(tokens to run, encoder tokens they take per encoder node) for ``n`` tokens of ``seq``
    from ``start``.

    Each part (image, audio clip) whose placeholder run starts in the chunk is encoded in this
    step by its graph node (``seq.part_nodes``); the chunk stops before the first one its node's
    budget left this step (``left``, ``full`` where the node has not run yet) cannot hold. A
    part larger than a node's whole budget still runs, alone at that node. A cross-attention
    part (no positions) is encoded with the chunk at position 0 and takes no placeholder rows.
    """
    used: dict[str, int] = {}
    for part, node in zip(seq.parts, seq.part_nodes, strict=True):
        if start <= part.offset < start + n:
            have = left.get(node, full)
            spent = used.get(node, 0)
            if spent + part.num_embeds > have and not (have == full and spent == 0):
                return part.offset - start, used
            used[node] = spent + part.num_embeds
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
