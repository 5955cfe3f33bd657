"""Image runs attended both ways (Gemma 3): the scheduler's chunks never end inside one, and the
prefill mask lets a run's tokens see each other, windowed as transformers composes it."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.engine.attention.masks import prefill_mask
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.image_cuts import image_run_cut
from mstar.models.vision.inputs import ImageInput


@st.composite
def prompts_with_runs(draw):
    """A prompt length and disjoint, ordered image runs inside it."""
    runs, pos = [], draw(st.integers(0, 5))
    for _ in range(draw(st.integers(1, 4))):
        length = draw(st.integers(1, 12))
        runs.append((pos, pos + length))
        pos += length + draw(st.integers(0, 6))
    return pos + 1, runs


def _seq(length: int, runs) -> Sequence:
    images = tuple(ImageInput(f"h{i}", {}, tuple(range(a, b))) for i, (a, b) in enumerate(runs))
    return Sequence("r", [0] * length, SamplingParams(), None, parts=images,
                    part_nodes=("vision_encoder",) * len(images))


@settings(max_examples=60, deadline=None)
@given(prompts_with_runs(), st.data())
def test_a_chunk_never_ends_inside_a_run_and_is_as_long_as_it_can_be(shape, data):
    length, runs = shape
    start = data.draw(st.integers(0, length - 1))
    n = data.draw(st.integers(1, length - start))
    cut = image_run_cut(_seq(length, runs), start, n)
    assert 0 <= cut <= n
    if cut:
        assert not any(a < start + cut < b for a, b in runs)
    # Nothing longer works: the tokens it drops would end the chunk inside a run.
    for longer in range(max(cut, 1), n + 1):
        if longer > cut:
            assert any(a < start + longer < b for a, b in runs)


@settings(max_examples=60, deadline=None)
@given(prompts_with_runs(), st.data(), st.sampled_from([None, 3, 8]))
def test_prefill_mask_is_causal_or_same_run_within_the_window(shape, data, window):
    length, runs = shape
    # A chunk ending at a run boundary (or past every run), as the scheduler makes them.
    ends = sorted({length} | {b for _, b in runs})
    ctx = data.draw(st.sampled_from(ends))
    q_len = data.draw(st.integers(1, ctx))
    spans = tuple((a, b) for a, b in runs if a < ctx and b > ctx - q_len)
    mask = prefill_mask(q_len, ctx, window, torch.device("cpu"), spans)
    for i, q in enumerate(range(ctx - q_len, ctx)):
        for k in range(ctx):
            same_run = any(a <= q < b and a <= k < b for a, b in runs)
            seen = (k <= q or same_run) and (window is None or k > q - window)
            assert (k <= q if mask is None else bool(mask[i, k])) == seen
