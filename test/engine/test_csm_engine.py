"""CSM's backbone in mstar's engine (paged KV cache, the step loop's rows), the depth decoder as
the runner's frame head: on a tiny random CSM, float32, greedy, the frames are the codes
transformers' ``CsmForConditionalGeneration.generate`` makes, alone, batched with a second CSM
request of another prompt and length, and under preemption; an end frame finishes a request;
and the codec node's waveform from the engine's frames is within the stated tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from csm_helpers import PROMPT, WAVE_TOLERANCE, reference, save_tiny_csm
from media_runs import preempting_blocks

from mstar.engine.request.sampling_params import SamplingParams

OTHER = [9, 3, 77, 120, 31, 8, 64, 200, 15, 44, 2]  # a longer prompt, another length of speech
FRAMES = {"one": 14, "other": 9}


@pytest.fixture(scope="module")
def tiny_csm(tmp_path_factory, tiny_tokenizer):
    return save_tiny_csm(tmp_path_factory.mktemp("csm"), tiny_tokenizer)


@pytest.fixture(scope="module")
def hf_csm(tiny_csm):
    from transformers import CsmForConditionalGeneration

    return CsmForConditionalGeneration.from_pretrained(tiny_csm).eval()


def _speak(engine, prompts: dict[str, list[int]]) -> dict[str, tuple[list, str]]:
    """Add every request, step to the end: (frames, finish reason) per request."""
    for rid, ids in prompts.items():
        engine.add_request(rid, ids, SamplingParams(max_tokens=FRAMES[rid], temperature=0.0))
    frames = {rid: [] for rid in prompts}
    reasons = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert len(out.new_frames) == len(out.new_token_ids)
            assert [f[0] for f in out.new_frames] == out.new_token_ids  # its token is code 0
            frames[out.request_id] += out.new_frames
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    return {rid: (frames[rid], reasons[rid]) for rid in prompts}


def _expected(hf_csm, rid: str, ids: list[int]) -> list[list[int]]:
    return reference(hf_csm, ids, FRAMES[rid])[0].tolist()


def test_alone_the_frames_are_transformers_codes(tiny_csm, hf_csm, make_engine):
    engine = make_engine(tiny_csm, kv_block_size=4, num_kv_blocks=64)
    (frames, reason), = _speak(engine, {"one": PROMPT}).values()
    assert frames == _expected(hf_csm, "one", PROMPT)
    assert reason == "length"


@pytest.mark.parametrize("continuations", [0, 1024], ids=["serial", "overlapped"])
def test_batched_with_another_speech_request(tiny_csm, hf_csm, make_engine, continuations):
    """Overlapped: a continuation row's input is the frame the step before it makes."""
    engine = make_engine(tiny_csm, kv_block_size=4, num_kv_blocks=64,
                         max_consecutive_spec_steps=continuations)
    got = _speak(engine, {"one": PROMPT, "other": OTHER})
    assert got["one"][0] == _expected(hf_csm, "one", PROMPT)
    assert got["other"][0] == _expected(hf_csm, "other", OTHER)
    assert (engine.loop.counters.continuations > 0) == (continuations > 0)


@pytest.mark.parametrize("step_tokens", [None, 5], ids=["whole", "chunked"])
def test_under_preemption_the_frames_resume(tiny_csm, hf_csm, make_engine, step_tokens):
    """The preempted request's recompute embeds its prompt and its frames so far; chunked (5
    tokens a step), its chunks cut across the prompt's end and between frames."""
    lens = {"one": len(PROMPT), "other": len(OTHER)}
    blocks = preempting_blocks(lens, max(FRAMES.values()))
    knobs = {} if step_tokens is None else dict(max_num_batched_tokens=step_tokens,
                                                max_prefill_chunk_tokens=step_tokens)
    engine = make_engine(tiny_csm, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False, **knobs)
    got = _speak(engine, {"one": PROMPT, "other": OTHER})
    assert engine.scheduler.num_preemptions > 0
    assert got["one"][0] == _expected(hf_csm, "one", PROMPT)
    assert got["other"][0] == _expected(hf_csm, "other", OTHER)


def test_an_end_frame_finishes_the_request(tiny_csm, make_engine, tmp_path, tiny_tokenizer):
    """Every head's logits tie, so argmax picks code 0, the end code: the first frame ends the
    request ("stop", before max_tokens), as transformers' generate stops there."""
    from transformers import CsmForConditionalGeneration

    hf_csm = CsmForConditionalGeneration.from_pretrained(tiny_csm).eval()
    with torch.no_grad():
        hf_csm.lm_head.weight.zero_()
        hf_csm.depth_decoder.codebooks_head.weight.zero_()
        hf_csm.save_pretrained(tmp_path)
    tiny_tokenizer.save_pretrained(tmp_path)
    engine = make_engine(tmp_path, kv_block_size=4, num_kv_blocks=64)
    (frames, reason), = _speak(engine, {"one": PROMPT}).values()
    assert frames == reference(hf_csm, PROMPT, FRAMES["one"])[0].tolist() == [[0, 0, 0, 0]]
    assert reason == "stop"


def test_llm_speak_sounds_the_engines_frames_within_tolerance(tiny_csm, hf_csm):
    """``LLM.speak``: the engine's frames through the codec node's windows, against
    transformers' codes and its one whole decode of them."""
    from mstar import LLM

    llm = LLM(model=str(tiny_csm), device="cpu", dtype="float32", kv_block_size=4,
              num_kv_blocks=64)
    one, other = llm.speak([{"prompt_token_ids": PROMPT}, {"prompt_token_ids": OTHER}],
                           max_frames=FRAMES["one"])
    codes = reference(hf_csm, PROMPT, FRAMES["one"])[0]
    assert torch.equal(one.codes, codes)
    assert torch.equal(other.codes, reference(hf_csm, OTHER, FRAMES["one"])[0])
    (wave,) = reference(hf_csm, PROMPT, FRAMES["one"], audio=True)
    wave = wave.numpy()
    assert one.audio.shape == wave.shape == (len(codes) * hf_csm.config.codec_config.frame_size,)
    assert np.abs(one.audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_speech_refuses_text_rules_and_text_models_refuse_speak(tiny_csm, make_engine,
                                                                tiny_model_dir):
    from mstar import LLM
    from mstar.engine.request.errors import RequestRejected
    from mstar.engine.request.sampling_params import StructuredOutput

    with pytest.raises(ValueError, match="speech models .CSM. run without speculative decoding"):
        make_engine(tiny_csm, kv_block_size=4, num_kv_blocks=64, speculative_method="ngram")
    engine = make_engine(tiny_csm, kv_block_size=4, num_kv_blocks=64)
    for field, value in [("stop_token_ids", [3]), ("min_tokens", 2),
                         ("structured_output", StructuredOutput(kind="regex", spec="a+"))]:
        with pytest.raises(RequestRejected, match=f"{field} is a text rule") as refused:
            engine.add_request(field, PROMPT, SamplingParams(max_tokens=4, **{field: value}))
        assert refused.value.param == field
    llm = LLM(model=str(tiny_model_dir("llama")), device="cpu", kv_block_size=4,
              num_kv_blocks=64)
    # a text model's engine has no frame head and keeps its own stop rule
    assert llm.engine.model_runner.frames is None and llm.engine.frame_stop is None
    with pytest.raises(ValueError, match="this model outputs text; not audio"):
        llm.speak("Hello")
