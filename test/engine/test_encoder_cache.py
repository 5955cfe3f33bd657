"""Invariants of the vision encoder's bookkeeping: the encoder cache never holds more than its
budget and answers each image with its own output; the scheduler's encoder cut never exceeds
the step's budget except for one image alone; the walk graph rejects malformed graphs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mstar.engine.kv.block_manager import chain_hash
from mstar.engine.runner.encoder_cache import EncoderCache
from mstar.engine.schedule.image_cuts import encoder_cut
from mstar.engine.schedule.scheduler_output import EncoderCounts
from mstar.graph import Edge, Node, NodeKind, Walk, WalkGraph, text_only, with_encoder
from mstar.models.vision.inputs import ImageInput

HIDDEN = 4


def _image(key: int, offset: int, n: int) -> ImageInput:
    return ImageInput(f"h{key}", {"k": torch.tensor([float(key)])}, tuple(range(offset, offset + n)))


def _encode(tensors) -> torch.Tensor:
    key = int(tensors["k"][0])
    return torch.full((key + 1, HIDDEN), float(key))  # an image's rows: its key + 1


@given(st.lists(st.integers(0, 6), max_size=40), st.integers(0, 200))
def test_the_cache_stays_within_its_budget_and_returns_each_images_rows(keys, capacity):
    cache = EncoderCache(capacity, torch.device("cpu"))
    counts = EncoderCounts()
    for key in keys:
        held = f"h{key}" in cache.entries
        misses = counts.misses
        out = cache.get(_image(key, 0, key + 1), _encode, counts)
        assert out.shape == (key + 1, HIDDEN) and bool((out == key).all())
        assert cache.used <= capacity
        assert cache.used == sum(t.numel() * t.element_size() for t in cache.entries.values())
        assert (f"h{key}" in cache.entries) == (out.numel() * out.element_size() <= capacity)
        assert counts.misses == misses + (not held)
    assert counts.hits + counts.misses == len(keys)


class _Seq:
    def __init__(self, images):
        self.parts = images
        self.part_nodes = ("vision_encoder",) * len(images)


@given(st.lists(st.integers(1, 12), min_size=1, max_size=5), st.integers(0, 60),
       st.integers(1, 60), st.integers(1, 20), st.booleans())
def test_the_encoder_cut_respects_the_budget(sizes, start, n, budget, fresh):
    images, offset = [], 3
    for i, size in enumerate(sizes):
        images.append(_image(i, offset, size))
        offset += size + 2
    left = {} if fresh else {"vision_encoder": budget}
    kept, used = encoder_cut(_Seq(images), start, n, left, budget + (not fresh))
    cost = used.get("vision_encoder", 0)
    assert 0 <= kept <= n
    started = [im for im in images if start <= im.offset < start + kept]
    assert cost == sum(im.num_embeds for im in started)
    assert cost <= budget or (fresh and len(started) == 1)
    if kept < n:  # the cut sits right before an image's run
        assert any(im.offset == start + kept for im in images)


def test_block_hashes_differ_by_image_and_match_for_the_same_one():
    tokens = (5, 5, 5, 5)
    assert chain_hash(None, tokens, ("a",)) != chain_hash(None, tokens, ("b",))
    assert chain_hash(None, tokens, ("a",)) == chain_hash(None, tokens, ("a",))
    assert chain_hash(1, tokens) == chain_hash(1, tokens, ())


def test_graphs_say_what_requests_walk():
    text = text_only()
    assert text.modalities() == ("text",) and text.prefill_walk({"text"}).nodes == (
        "language_model",)
    with pytest.raises(ValueError, match="takes text"):
        text.prefill_walk({"text", "image"})
    vlm = with_encoder("vision_encoder", "image", "image_embeds")
    assert vlm.modalities() == ("text", "image")
    assert vlm.prefill_walk({"text", "image"}).nodes == ("vision_encoder", "language_model")
    assert vlm.walk("text").nodes == ("language_model",)
    lm = Node("language_model", NodeKind.LANGUAGE_MODEL)
    enc = Node("enc", NodeKind.ENCODER, "image")
    with pytest.raises(ValueError, match="along no edge"):
        WalkGraph((enc, lm), (), (Walk("w", ("enc", "language_model")),))
    with pytest.raises(ValueError, match="at least one language-model"):
        WalkGraph((enc,), (), ())
    with pytest.raises(ValueError, match="unknown nodes"):
        WalkGraph((lm,), (Edge("x", "nope", "language_model"),), ())


def test_a_text_only_engine_refuses_images(tiny_model_dir, make_engine):
    from mstar.engine.request.errors import RequestRejected
    from mstar.engine.request.sampling_params import SamplingParams

    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="takes text"):
        engine.add_request("r", [1, 2, 3], SamplingParams(max_tokens=2), (_image(1, 1, 2),))
    assert not engine.has_unfinished_requests()
