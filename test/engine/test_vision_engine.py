"""Vision-language models through the engine: greedy tokens equal transformers' generate alone,
batched with text-only requests, with chunked prefill cutting through image placeholders, under
preemption, with two images; the encoder cache and budget; prefix caching keyed by image."""

from __future__ import annotations

import pytest
from media_runs import family_factory, preempting_blocks, run_built, run_cached
from vlm_helpers import image, make_tiny_vlm, prompt_text, transformers_greedy

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.vision.inputs import build_prompt, load_processor

MAX_NEW = 10
FAMILIES = ["smolvlm", "llava_clip", "qwen2_5_vl", "gemma3"]
# Chunk sizes that cut through image placeholders. Gemma 3's image tokens attend to each other
# both ways, so its chunks stop before an image they would split (16 tokens: one chunk holds
# a whole image); the others split runs anywhere.
CHUNK = {"gemma3": 20}


@pytest.fixture(scope="module")
def vlm(tmp_path_factory, tiny_tokenizer):
    """Factory: family -> (model dir, processor, requests {id: (text, images)}, references)."""
    return family_factory(
        lambda family: make_tiny_vlm(family, tiny_tokenizer, tmp_path_factory.mktemp(family)),
        load_processor, prompt_text, transformers_greedy, "picture", image,
        [image(3, (30, 60)), image(4)], MAX_NEW)


def _run(engine, processor, requests, ids=None):
    built = {rid: build_prompt(processor, *requests[rid]) for rid in ids or requests}
    return run_built(engine, built, MAX_NEW)


@pytest.mark.parametrize("family", FAMILIES)
def test_alone_and_batched_with_text_match(family, vlm, make_engine):
    path, processor, requests, refs = vlm(family)
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512)
    for rid in ("one", "two"):
        assert _run(engine, processor, requests, [rid]) == {rid: refs[rid]}
    assert _run(engine, processor, requests) == refs


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_through_placeholders_matches(family, vlm, make_engine):
    path, processor, requests, refs = vlm(family)
    # 7-token chunks: every image's placeholder run is split across steps.
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512,
                         max_num_batched_tokens=CHUNK.get(family, 7), encoder_cache_mb=0)
    assert _run(engine, processor, requests) == refs


def test_an_image_run_longer_than_a_step_is_refused_by_name(vlm, make_engine):
    """Gemma 3 runs each image's 16 tokens in one step: a smaller step budget cannot."""
    from mstar.engine.request.errors import RequestRejected

    path, processor, requests, refs = vlm("gemma3")
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, max_num_batched_tokens=8)
    prompt, images = build_prompt(processor, *requests["one"])
    with pytest.raises(RequestRejected, match="MSTAR_MAX_NUM_BATCHED_TOKENS") as err:
        engine.add_request("big", prompt, SamplingParams(max_tokens=2), images)
    assert err.value.param == "messages"


@pytest.mark.parametrize("family", FAMILIES)
def test_preemption_and_recompute_match(family, vlm, make_engine):
    path, processor, requests, refs = vlm(family)
    lens = {rid: len(build_prompt(processor, t, i)[0]) for rid, (t, i) in requests.items()}
    blocks = preempting_blocks(lens, MAX_NEW)
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False)
    assert _run(engine, processor, requests) == refs
    assert engine.scheduler.num_preemptions > 0
    assert engine.stats().free_blocks == blocks


def test_encoder_budget_and_cache(vlm, make_engine):
    path, processor, requests, refs = vlm("smolvlm")
    # A budget of one tile: each image (several tiles) runs alone, in a step of its own.
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, max_encoder_tokens_per_step=4,
                         enable_prefix_caching=False)
    assert _run(engine, processor, requests) == refs
    s = engine.stats()
    assert (s.encoder_cache_hits, s.encoder_cache_misses) == (0, 4) and s.encoder_seconds > 0
    assert _run(engine, processor, requests, ["one"]) == {"one": refs["one"]}
    s = engine.stats()
    assert (s.encoder_cache_hits, s.encoder_cache_misses) == (1, 4)


def test_prefix_cache_shares_kv_only_for_the_same_image(vlm, make_engine):
    path, processor, requests, refs = vlm("smolvlm")
    engine = make_engine(path, kv_block_size=4, num_kv_blocks=512, enable_prefix_caching=True)
    assert _run(engine, processor, requests, ["one"]) == {"one": refs["one"]}
    same_text_other_image = _cached(engine, processor, requests, "other")
    same_image = _cached(engine, processor, requests, "one")
    image_start = build_prompt(processor, *requests["one"])[1][0].offset
    assert same_text_other_image <= image_start  # the shared text before the image only
    assert same_image > image_start + 4


def _cached(engine, processor, requests, rid) -> int:
    return run_cached(engine, *build_prompt(processor, *requests[rid]), 2)[1]


@pytest.mark.parametrize("family", ["smolvlm", "gemma3"])  # Gemma 3's marker is not its token
def test_llm_chat_takes_openai_image_parts(family, vlm):
    import base64
    import io

    from mstar import LLM

    path, processor, requests, refs = vlm(family)
    png = io.BytesIO()
    requests["one"][1][0].save(png, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    llm = LLM(str(path), dtype="float32", device="cpu", num_kv_blocks=256)
    conversation = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "Describe the picture."}]}]
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    result, text_only = llm.chat([conversation, [{"role": "user", "content": "Hello"}]], params)
    assert result.token_ids == refs["one"]
    assert text_only.token_ids  # a text conversation in the same batch runs as before
