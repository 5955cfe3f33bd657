"""Audio-in language models (Qwen2-Audio, Voxtral) through the engine: greedy tokens equal
transformers' generate alone, batched with text-only requests, with chunked prefill cutting
through audio placeholders, under preemption, with two clips; prefix caching keyed by the clip's
content hash (same tokens, other audio: no shared KV past the text before it)."""

from __future__ import annotations

import pytest
from alm_helpers import clip, make_tiny_alm, prompt_text, transformers_greedy
from media_runs import family_factory, preempting_blocks, run_built, run_cached

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.audio.prompt import build_audio_prompt

MAX_NEW = 10
FAMILIES = ["qwen2_audio", "voxtral"]


@pytest.fixture(scope="module")
def alm(tmp_path_factory, tiny_tokenizer):
    """Factory: family -> (model dir, processor, requests {id: (text, clips)}, references)."""
    from transformers import AutoProcessor

    return family_factory(
        lambda family: make_tiny_alm(family, tiny_tokenizer, tmp_path_factory.mktemp(family)),
        AutoProcessor.from_pretrained, prompt_text, transformers_greedy, "sound", clip,
        [clip(3, 0.3), clip(4, 1.4)], MAX_NEW)


def _run(engine, processor, requests, ids=None):
    built = {rid: build_audio_prompt(processor, *requests[rid]) for rid in ids or requests}
    return run_built(engine, built, MAX_NEW)


@pytest.mark.parametrize("family", FAMILIES)
def test_alone_and_batched_with_text_match(family, alm, make_engine):
    path, processor, requests, refs = alm(family)
    assert len(set(map(tuple, refs.values()))) == len(refs)  # the audio changes the outputs
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512)
    for rid in ("one", "two"):
        assert _run(engine, processor, requests, [rid]) == {rid: refs[rid]}
    assert _run(engine, processor, requests) == refs


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_through_placeholders_matches(family, alm, make_engine):
    path, processor, requests, refs = alm(family)
    # 7-token chunks: every clip's placeholder run is split across steps.
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, max_num_batched_tokens=7,
                         encoder_cache_mb=0)
    assert _run(engine, processor, requests) == refs


@pytest.mark.parametrize("family", FAMILIES)
def test_preemption_and_recompute_match(family, alm, make_engine):
    path, processor, requests, refs = alm(family)
    lens = {rid: len(build_audio_prompt(processor, t, c)[0]) for rid, (t, c) in requests.items()}
    blocks = preempting_blocks(lens, MAX_NEW)
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False)
    assert _run(engine, processor, requests) == refs
    assert engine.scheduler.num_preemptions > 0
    assert engine.stats().free_blocks == blocks


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_cache_shares_kv_only_for_the_same_clip(family, alm, make_engine):
    """"one" and "other" have the same tokens and different clips: with the clip's hash in the
    block hashes, "other" shares only the text before its clip, and its tokens are its own."""
    path, processor, requests, refs = alm(family)
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, enable_prefix_caching=True)
    assert _run(engine, processor, requests, ["one"]) == {"one": refs["one"]}
    ids_one, (clip_one,) = build_audio_prompt(processor, *requests["one"])
    assert ids_one == build_audio_prompt(processor, *requests["other"])[0]
    other, other_cached = run_cached(engine, *build_audio_prompt(processor, *requests["other"]),
                                     MAX_NEW)
    assert other == refs["other"]
    assert other_cached <= clip_one.offset  # the shared text before the clip only
    same, same_cached = run_cached(engine, *build_audio_prompt(processor, *requests["one"]),
                                   MAX_NEW)
    assert same == refs["one"] and same_cached > clip_one.end


def test_the_encoder_budget_counts_audio_rows_per_node(alm, make_engine):
    """A budget smaller than a clip: each clip runs alone in its step's audio encoder node."""
    path, processor, requests, refs = alm("qwen2_audio")
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, max_encoder_tokens_per_step=4,
                         enable_prefix_caching=False)
    assert _run(engine, processor, requests) == refs
    s = engine.stats()
    assert (s.encoder_cache_hits, s.encoder_cache_misses) == (0, 4)


def test_a_vision_model_refuses_audio_by_name(tiny_model_dir, alm, make_engine):
    from mstar.engine.request.errors import RequestRejected

    path, processor, requests, _ = alm("qwen2_audio")
    prompt, clips = build_audio_prompt(processor, *requests["one"])
    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="takes text; not audio") as err:
        engine.add_request("r", prompt[:8], SamplingParams(max_tokens=2), tuple(clips))
    assert err.value.param == "messages"


def test_a_chat_with_an_input_audio_part_matches(alm, make_engine):
    """OpenAI-shaped messages: the part becomes the processor's chat-template audio marker
    (Qwen2-Audio's own template), the marker the clip's placeholders."""
    from mstar.prompt import chat_media

    path, processor, _, _ = alm("qwen2_audio")
    messages = [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
        {"type": "text", "text": "What is that sound?"}]}]
    (ref,) = chat_media.media_refs(messages)
    assert (ref.modality, ref.audio) == ("audio", {"data": "", "format": "wav"})
    text = chat_media.render(processor, messages)
    assert processor.audio_token in text
    prompt = chat_media.build(processor, text, [clip(5)], modality="audio")
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512)
    got = run_built(engine, {"chat": (prompt.token_ids, prompt.parts)}, MAX_NEW)
    assert got == {"chat": transformers_greedy(path, text, [clip(5)], MAX_NEW)}
