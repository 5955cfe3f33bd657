"""Qwen3-Omni's thinker through the engine (mstar's Qwen3-MoE decoder, transformers' audio
encoder through the audio-in path), on the tiny random Qwen3-Omni of ``omni_helpers`` (float32,
greedy): its tokens are transformers' ``thinker.generate``'s for text prompts and prompts with
audio clips, alone, batched with each other (different lengths) and under preemption. The model
is drawn so that the experts, the attention and the audio all move the tokens (checked here)."""

from __future__ import annotations

import pytest
import torch
from alm_helpers import clip
from media_runs import preempting_blocks, run_built
from omni_helpers import save_tiny_thinker, thinker_generate, thinker_prompt

MAX_NEW = 10
# 1.3 s crosses one encoder window (100 mel frames); 3.1 s crosses an attention span (200).
# Clips a prompt holds together are each over one window: transformers encodes a prompt's clips
# as one batch, every window padded to the longest, so a clip shorter than a window comes out
# otherwise than alone (its last row reads its convolutions of the padding, and attention
# spreads that over its rows: up to 1e-2 here). The engine encodes each clip alone, as
# transformers does a prompt's one clip.
CLIPS = {"short": clip(3, 1.3), "long": clip(4, 3.1)}


@pytest.fixture(scope="module")
def thinker_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_thinker(tmp_path_factory.mktemp("omni-thinker"), tiny_tokenizer)


@pytest.fixture(scope="module")
def oracle(thinker_dir):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        thinker_dir, dtype=torch.float32).eval()


def _requests(config) -> dict[str, tuple[list[int], list]]:
    return {"one": thinker_prompt(config, [11, 12, 13], [CLIPS["short"]]),
            "other": thinker_prompt(config, [11, 12, 13], [CLIPS["long"]]),
            "two": thinker_prompt(config, [40, 41], [CLIPS["long"], CLIPS["short"]]),
            "text": thinker_prompt(config, [40, 41, 42, 43, 44, 45, 46], [])}


def _greedy(model, ids: list[int], parts: list) -> list[int]:
    return thinker_generate(model, ids, parts, MAX_NEW).sequences[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def refs(oracle):
    return {rid: _greedy(oracle, *req) for rid, req in _requests(oracle.config).items()}


def test_the_tiny_thinker_depends_on_its_experts_and_audio(oracle, refs):
    """The references differ by clip, and shuffling one layer's experts changes the tokens (so a
    wrong routing cannot pass)."""
    assert len({tuple(t) for t in refs.values()}) == len(refs)
    ids, parts = _requests(oracle.config)["one"]
    experts = oracle.thinker.model.language_model.layers[1].mlp.experts
    saved = experts.gate_up_proj.detach().clone(), experts.down_proj.detach().clone()
    order = [1, 0, 3, 2]
    with torch.no_grad():
        experts.gate_up_proj.copy_(saved[0][order])
        experts.down_proj.copy_(saved[1][order])
    try:
        assert _greedy(oracle, ids, parts) != refs["one"]
    finally:
        with torch.no_grad():
            experts.gate_up_proj.copy_(saved[0])
            experts.down_proj.copy_(saved[1])


def test_alone_and_batched_match_transformers(thinker_dir, oracle, refs, make_engine):
    requests = _requests(oracle.config)
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=512)
    for rid in ("text", "one"):
        assert run_built(engine, {rid: requests[rid]}, MAX_NEW) == {rid: refs[rid]}
    assert run_built(engine, requests, MAX_NEW) == refs


def test_chunked_prefill_through_the_clip_matches(thinker_dir, oracle, refs, make_engine):
    """7-token chunks: every clip's placeholder run is split across steps."""
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=512,
                         max_num_batched_tokens=7, encoder_cache_mb=0)
    assert run_built(engine, _requests(oracle.config), MAX_NEW) == refs


def test_preemption_and_recompute_match(thinker_dir, oracle, refs, make_engine):
    requests = _requests(oracle.config)
    blocks = preempting_blocks({rid: len(ids) for rid, (ids, _) in requests.items()}, MAX_NEW)
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False)
    assert run_built(engine, requests, MAX_NEW) == refs
    assert engine.scheduler.num_preemptions > 0
    assert engine.stats().free_blocks == blocks


def test_an_image_is_refused_by_name(thinker_dir, oracle, make_engine):
    """The thinker's graph has no vision encoder: an image part is refused, naming the
    modalities it takes."""
    from mstar.engine.request.errors import RequestRejected
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.models.vision.inputs import ImageInput

    ids, _ = _requests(oracle.config)["text"]
    image = ImageInput("h", {"pixel_values": torch.zeros(1, 3, 8, 8)}, (2, 3))
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="takes text, audio; not image"):
        engine.add_request("r", ids, SamplingParams(max_tokens=2), (image,))


def test_the_offline_llm_loads_the_directory(thinker_dir, oracle, refs):
    """``mstar.LLM`` on the saved Qwen3-Omni directory runs its thinker (settings checks and
    all)."""
    from mstar import LLM, SamplingParams

    llm = LLM(model=str(thinker_dir), device="cpu", dtype="float32", kv_block_size=4,
              num_kv_blocks=64)
    ids, _ = _requests(oracle.config)["text"]
    (out,) = llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0,
                                                                     max_tokens=MAX_NEW))
    assert out.token_ids == refs["text"] and out.finish_reason == "stop"


def test_preflight_reads_the_thinker_s_shape(thinker_dir):
    """``mstar config validate --model``'s shape of a Qwen3-Omni directory is its thinker's
    decoder (``thinker_config.text_config``), the one the engine runs."""
    from mstar.settings.checks.preflight import read_shape

    shape = read_shape(thinker_dir / "config.json")
    assert (shape.limit, shape.kv_layers, shape.kv_heads, shape.head_dim, shape.heads) == \
        (512, 2, 2, 8, 4)
