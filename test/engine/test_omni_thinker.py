"""Qwen3-Omni's thinker through the engine (mstar's Qwen3-MoE decoder, transformers' audio
encoder through the audio-in path), on the tiny random Qwen3-Omni of ``omni_helpers`` (float32,
greedy): its tokens are transformers' ``thinker.generate``'s for text prompts and prompts with
audio clips, alone, batched with each other (different lengths) and under preemption. The model
is drawn so that the experts, the attention and the audio all move the tokens (checked here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from alm_helpers import clip
from media_runs import preempting_blocks, run_built
from omni_helpers import save_tiny_thinker

from mstar.models.audio.inputs import AudioInput
from mstar.models.audio.prompt import qwen3_omni_clip
from mstar.models.vision.inputs import content_hash

MAX_NEW = 10
# 1.3 s crosses one encoder window (100 mel frames); 3.1 s crosses an attention span (200).
CLIPS = {"short": clip(3, 1.3), "long": clip(4, 3.1)}


@pytest.fixture(scope="module")
def thinker_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_thinker(tmp_path_factory.mktemp("omni-thinker"), tiny_tokenizer)


@pytest.fixture(scope="module")
def oracle(thinker_dir):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        thinker_dir, dtype=torch.float32).eval()


def _extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=16, sampling_rate=16_000, hop_length=160,
                                   n_fft=400)


def _prompt(config, words: list[int], clips: list[np.ndarray]) -> tuple[list[int], list]:
    """A user turn (each clip as ``<audio_start> <audio>*rows``, then ``words``) and the
    assistant's opening; the clips' ``AudioInput``s at their placeholder positions."""
    start, end = config.im_start_token_id, config.im_end_token_id
    audio = config.thinker_config.audio_token_id
    ids, parts = [start, config.user_token_id], []
    for wave in clips:
        tensors, rows = qwen3_omni_clip(_extractor(), wave)
        ids.append(config.thinker_config.audio_start_token_id)
        parts.append(AudioInput(content_hash(tensors), tensors,
                                tuple(range(len(ids), len(ids) + rows)), len(wave) / 16_000))
        ids += [audio] * rows + [9]
    return ids + [*words, end, start, config.assistant_token_id, 7], parts


def _requests(config) -> dict[str, tuple[list[int], list]]:
    return {"one": _prompt(config, [11, 12, 13], [CLIPS["short"]]),
            "other": _prompt(config, [11, 12, 13], [CLIPS["long"]]),
            "two": _prompt(config, [40, 41], [CLIPS["long"], CLIPS["short"]]),
            "text": _prompt(config, [40, 41, 42, 43, 44, 45, 46], [])}


def _greedy(model, ids: list[int], parts: list) -> list[int]:
    """transformers' thinker ``generate``: the clips' features padded to the longest, with the
    mask its processor makes."""
    kwargs = {}
    if parts:
        feats = [p.tensors["input_features"][0] for p in parts]
        longest = max(f.shape[-1] for f in feats)
        kwargs["input_features"] = torch.stack(
            [torch.nn.functional.pad(f, (0, longest - f.shape[-1])) for f in feats])
        kwargs["feature_attention_mask"] = torch.stack(
            [(torch.arange(longest) < f.shape[-1]).long() for f in feats])
    with torch.inference_mode():
        out = model.thinker.generate(
            input_ids=torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
            eos_token_id=model.config.im_end_token_id, **kwargs)
    return out[0, len(ids):].tolist()


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
