"""Qwen3-Omni's chained walk in process (``mstar.engine.chain``): a request with
``SamplingParams.speaker`` runs the thinker, the talker (a second engine: its own scheduler, KV
cache and budget) fed row by row over the streaming edge, and code2wav. On the tiny random model,
float32, greedy: the text is transformers' thinker ``generate``'s, the talker's codes are those of
the offline chain (transformers' rows ``talker_inputs`` -> ``TalkerFrames``, which
test/models/test_omni_talker.py holds equal to transformers' talker), and the waveform is within
the offline test's tolerance of the offline codec's. Alone, with an audio clip, batched with
text-only requests, and under preemption in both nodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omni_chain_runs import (
    MAX_NEW,
    SPEECH_SECONDS,
    STREAMED,
    TALKER_BLOCKS,
    WAVE_TOLERANCE,
    check_chain,
    reference,
    reference_inputs,
    requests_of,
    run_chain,
)

from mstar.engine.chain.speech_chain import SpeechChain, talker_engine_settings
from mstar.engine.chain.talker_seam import LocalTalker
from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.sampling_params import SamplingParams
from mstar.graph.speech import OMNI_CHUNK_FRAMES


def _chain(omni_thinker_dir, make_engine, thinker_blocks=256, talker_blocks=256, **knobs):
    """The talker's budget through its knob (MSTAR_TALKER_NUM_KV_BLOCKS); code2wav's windows
    the oracle's (transformers' 300 after 25, MSTAR_SPEECH_CHUNK_FRAMES); ``knobs``: both
    nodes' other settings."""
    thinker = make_engine(omni_thinker_dir, kv_block_size=4, num_kv_blocks=thinker_blocks,
                          enable_prefix_caching=False, max_speech_seconds=SPEECH_SECONDS,
                          talker_num_kv_blocks=talker_blocks,
                          speech_chunk_frames=OMNI_CHUNK_FRAMES, **knobs)
    return SpeechChain(thinker)


def test_alone_the_text_and_speech_are_the_offline_chains(omni_thinker_dir, omni_speaker, make_engine):
    chain = _chain(omni_thinker_dir, make_engine)
    requests = requests_of(omni_speaker.model.config)
    for rid in requests:  # "text": the talker ends (its end code) before the thinker does;
        # "other": it speaks MAX_FRAMES frames, long after the thinker's end
        one = {rid: requests[rid]}
        check_chain(omni_speaker, one, run_chain(chain, one, {rid}), {rid})
        assert any(STREAMED)
    assert chain.thinker.stats().free_blocks == 256 and chain.talker.stats().free_blocks == 256


@pytest.mark.parametrize("continuations", [0, 1024], ids=["serial", "overlapped"])
def test_batched_with_text_only_requests(omni_thinker_dir, omni_speaker, make_engine, continuations):
    chain = _chain(omni_thinker_dir, make_engine, max_consecutive_spec_steps=continuations)
    requests = requests_of(omni_speaker.model.config)
    speaking = {"text", "audio"}
    check_chain(omni_speaker, requests, run_chain(chain, requests, speaking), speaking)
    for node in (chain.thinker, chain.talker.engine):
        assert (node.loop.counters.continuations > 0) == (continuations > 0)


@pytest.mark.parametrize("step_tokens", [None, 7], ids=["whole", "chunked"])
def test_under_preemption_in_both_nodes(omni_thinker_dir, omni_speaker, make_engine, step_tokens):
    """Budgets that hold both prompts, not both replies, in the thinker and in the talker;
    chunked: 7-token steps cut the clip and the talker's prefill rows."""
    requests = {rid: requests_of(omni_speaker.model.config)[rid] for rid in ("other", "audio")}
    thinker_blocks = sum(-(-(len(ids) + 4) // 4) for ids, _ in requests.values())
    knobs = {} if step_tokens is None else dict(max_num_batched_tokens=step_tokens,
                                                max_prefill_chunk_tokens=step_tokens)
    chain = _chain(omni_thinker_dir, make_engine, thinker_blocks, TALKER_BLOCKS, **knobs)
    check_chain(omni_speaker, requests, run_chain(chain, requests, set(requests)), set(requests))
    # chunked, the thinker's prompts are admitted a chunk at a time and its replies fit
    assert (chain.thinker.scheduler.num_preemptions > 0) == (step_tokens is None)
    assert chain.talker.engine.scheduler.num_preemptions > 0
    assert chain.thinker.stats().free_blocks == thinker_blocks
    assert chain.talker.stats().free_blocks == TALKER_BLOCKS


def test_an_unknown_voice_and_a_model_without_one_are_refused_by_name(
        omni_thinker_dir, omni_speaker, make_engine, tiny_model_dir):
    chain = _chain(omni_thinker_dir, make_engine)
    ids, _ = requests_of(omni_speaker.model.config)["text"]
    with pytest.raises(RequestRejected, match="unknown voice 'nobody'") as err:
        chain.add_request("r", ids, SamplingParams(max_tokens=2, speaker="nobody"))
    assert err.value.param == "speaker"
    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="no audio-out walk") as err:
        engine.add_request("r", [1, 2, 3], SamplingParams(max_tokens=2, speaker="ethan"))
    assert err.value.param == "speaker"


def test_llm_generate_returns_text_and_audio(omni_thinker_dir, omni_speaker, device):
    """``mstar.LLM`` runs the chain: a request with ``speaker`` gets its audio beside its
    text; one without is the thinker's text alone."""
    from mstar import LLM

    llm = LLM(str(omni_thinker_dir), device=device, dtype="float32", kv_block_size=4,
              num_kv_blocks=256, max_speech_seconds=SPEECH_SECONDS,
              speech_chunk_frames=OMNI_CHUNK_FRAMES, prefill_share_beside_decodes=0.0)
    ids, parts = requests_of(omni_speaker.model.config)["other"]
    spoken, plain = llm.generate([{"prompt_token_ids": ids}] * 2, [
        SamplingParams(temperature=0.0, max_tokens=MAX_NEW, speaker="ethan"),
        SamplingParams(temperature=0.0, max_tokens=MAX_NEW)])
    said, frames, wave = reference(omni_speaker, ids, parts)
    assert spoken.token_ids == plain.token_ids == said[:len(spoken.token_ids)]
    assert spoken.text == plain.text and plain.audio is None
    assert spoken.sample_rate == 24_000 and spoken.audio.shape == wave.shape
    assert np.abs(spoken.audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_an_abort_mid_speech_stops_both_nodes(omni_thinker_dir, omni_speaker, make_engine):
    """Aborted once the talker has made frames and the thinker is done: nothing more comes
    out, and every block of both caches is back."""
    chain = _chain(omni_thinker_dir, make_engine)
    ids, _ = requests_of(omni_speaker.model.config)["other"]
    chain.add_request("r", ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                               speaker="ethan"))
    while not (chain.talker.has_unfinished_requests()
               and not chain.thinker.has_unfinished_requests()):
        assert not any(out.finished for out in chain.step())
    speaking = chain.stats()  # the worker's gauges: the talker's blocks count
    assert speaking.running == 1 and speaking.kv_cache_usage > 0
    assert speaking.free_blocks == 256 + chain.talker.stats().free_blocks
    chain.abort_request("r")
    steps = 0
    while chain.has_unfinished_requests():  # a step in flight may still end (overlapped loop)
        assert chain.step() == []
        steps += 1
    assert steps <= 1
    idle = chain.stats()
    assert (idle.running, idle.waiting, idle.kv_cache_usage, idle.free_blocks) == (0, 0, 0.0, 512)


def test_a_prompt_without_the_assistant_opening_is_refused_by_name(omni_thinker_dir, make_engine):
    chain = _chain(omni_thinker_dir, make_engine)
    with pytest.raises(RequestRejected, match="assistant turn's opening") as err:
        chain.add_request("r", [5, 6, 7, 8], SamplingParams(max_tokens=2, speaker="ethan"))
    assert err.value.param == "prompt" and not chain.has_unfinished_requests()


def test_the_registry_says_which_models_speak_replies():
    """The API server's question (no torch): a ``speaker`` may be asked of Qwen3-Omni only."""
    from mstar.models.loading.registry import speaks_replies

    assert speaks_replies(["Qwen3OmniMoeForConditionalGeneration"])
    for archs in (["LlamaForCausalLM"], ["CsmForConditionalGeneration"],
                  ["Qwen3OmniMoeTalkerForConditionalGeneration"], ["NoSuchModel"], None):
        assert not speaks_replies(archs)


ROWS_TOLERANCE = 1e-4  # of the peak, as test_omni_thinker_rows states it for the same rows


@pytest.mark.parametrize("rid", ["text", "audio", "other"])
def test_the_edge_feeds_transformers_rows(omni_thinker_dir, omni_speaker, make_engine, rid):
    """The streaming edge's feed, fed the thinker engine's outputs one by one, holds
    transformers' talker rows (``talker_inputs``): the prefill (user turns, media hidden rows
    through ``hidden_projection``, the speaker's codec row), each step's row, ``tts_eos``, and
    ``pad``; its prefill is made at the first token and the feed finished at the last."""
    from mstar.engine.chain.talker_edge import TalkerEdge, speaker_id

    chain = _chain(omni_thinker_dir, make_engine)
    config = omni_speaker.model.config
    ids, parts = requests_of(config)[rid]
    edge = TalkerEdge(chain.edge, chain.config, chain.embed, ids, speaker_id(config, "ethan"))
    chain.thinker.add_request(rid, ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                                       thinker_rows=True), tuple(parts))
    feeds = []
    while chain.thinker.has_unfinished_requests():
        for out in chain.thinker.step():
            made = edge.take(out)
            feeds += [made] if made is not None else []
            assert (edge.feed is not None) == (out.num_output_tokens > 0)
    (feed,) = feeds
    assert feed.finished
    _, ref = reference_inputs(omni_speaker.model, ids, parts)
    for got, want in ((feed.prompt, ref.prompt), (torch.stack(feed.rows), ref.text),
                      (feed.pad, ref.pad)):
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=0, atol=ROWS_TOLERANCE * want.abs().max())


def test_the_text_leaves_when_the_thinker_ends_not_with_the_speech(omni_thinker_dir, omni_speaker,
                                                                   make_engine):
    """"other"'s talker speaks on after the thinker's end: every text token but the stop token
    the thinker ended on is out by the step the thinker finished; only the finish (with that
    token) waits for the talker's, and comes with the last audio, steps later."""
    chain = _chain(omni_thinker_dir, make_engine)
    ids, parts = requests_of(omni_speaker.model.config)["other"]
    chain.add_request("other", ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                                   speaker="Ethan"), tuple(parts))
    text, text_at_thinker_end, thinker_end, finish, reason, step = [], None, None, None, None, 0
    while chain.has_unfinished_requests():
        for out in chain.step():
            text += out.new_token_ids
            if out.finished:
                finish, reason = step, out.finish_reason
        if thinker_end is None and not chain.thinker.has_unfinished_requests():
            thinker_end, text_at_thinker_end = step, list(text)
        step += 1
    said = reference(omni_speaker, ids, parts)[0]
    assert text == said
    assert text_at_thinker_end == said[:len(said) - (reason == "stop")]
    assert finish > thinker_end


class _Lagging(LocalTalker):
    """A talker whose outputs arrive two steps at a time, as a placed talker's may (several of
    its steps between two of the chain's): a request then has two outputs in one hand-over."""

    def step(self, wait: bool):
        outs = self.engine.step()
        return outs + (self.engine.step() if self.engine.has_unfinished_requests() else [])


def test_a_talker_handing_over_two_steps_at_once_loses_no_audio(omni_thinker_dir, omni_speaker, make_engine):
    """With code2wav windows of 2 frames, a hand-over of two talker steps holds two outputs of
    a request that each made audio: the chain's audio is the same as with a talker handing
    over one step at a time."""
    got = []
    for lagging in (False, True):
        thinker = make_engine(omni_thinker_dir, kv_block_size=4, num_kv_blocks=256,
                              enable_prefix_caching=False, max_speech_seconds=SPEECH_SECONDS,
                              talker_num_kv_blocks=256, speech_chunk_frames=2)
        engine = LLMEngine(talker_engine_settings(thinker.settings),
                           architecture=thinker.model_runner.entry.talker)
        chain = SpeechChain(thinker, talker=_Lagging(engine) if lagging else LocalTalker(engine))
        requests = requests_of(omni_speaker.model.config)  # "other" speaks on after the thinker's end
        got.append(run_chain(chain, requests, {"audio", "other"}))
    steady, lagged = got
    for rid in ("audio", "other"):
        assert lagged[rid][0] == steady[rid][0] and lagged[rid][3] == steady[rid][3]
        assert steady[rid][1].size > 0 and np.array_equal(lagged[rid][1], steady[rid][1])
