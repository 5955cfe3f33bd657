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
from alm_helpers import clip
from omni_helpers import (
    CODEC_CUT,
    SAMPLES_PER_FRAME,
    save_tiny_thinker,
    thinker_generate,
    thinker_prompt,
)

from mstar.engine.chain.speech_chain import SpeechChain
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.sampling_params import SamplingParams
from mstar.graph.speech import OMNI_CHUNK_FRAMES
from mstar.models.speech.omni_speaker import OmniSpeaker
from mstar.models.speech.omni_talker_inputs import talker_inputs

MAX_NEW = 8
SPEECH_SECONDS = 2.4  # the talker's frames bound: 30 frames at 12.5 a second
MAX_FRAMES = 30
# The talker's budget in the preemption test: room for either request alone (up to 31 + 30
# positions) and both prefills (15 and 31 rows), not both replies
TALKER_BLOCKS = 16
WAVE_TOLERANCE = 1e-6  # of the peak, as test/models/test_omni_speech.py states it


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_thinker(tmp_path_factory.mktemp("omni-chain"), tiny_tokenizer)


@pytest.fixture(scope="module")
def oracle(omni_dir):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(omni_dir, dtype=torch.float32)
    return OmniSpeaker(model.eval())


def _requests(config) -> dict[str, tuple[list[int], list]]:
    return {"text": thinker_prompt(config, [40, 41, 42, 43, 44, 45, 46], []),
            "audio": thinker_prompt(config, [11, 12, 13], [clip(3, 1.3)]),
            "other": thinker_prompt(config, [20, 21, 22], [])}


def _reference(oracle: OmniSpeaker, ids, parts):
    """(reply tokens, frames [n, K], waveform) of the offline chain: transformers' thinker, its
    rows, the offline talker loop and codec."""
    said, inputs = _reference_inputs(oracle, ids, parts)
    frames, chunks = [], []
    for frame, ready in oracle.stream(inputs, MAX_FRAMES):
        frames.append(frame.tolist())
        chunks += ready
    return said[len(ids):], frames, np.concatenate(chunks)


def _chain(omni_dir, make_engine, thinker_blocks=256, talker_blocks=256, **knobs):
    """The talker's budget through its knob (MSTAR_TALKER_NUM_KV_BLOCKS); code2wav's windows
    the oracle's (transformers' 300 after 25, MSTAR_SPEECH_CHUNK_FRAMES); ``knobs``: both
    nodes' other settings."""
    thinker = make_engine(omni_dir, kv_block_size=4, num_kv_blocks=thinker_blocks,
                          enable_prefix_caching=False, max_speech_seconds=SPEECH_SECONDS,
                          talker_num_kv_blocks=talker_blocks,
                          speech_chunk_frames=OMNI_CHUNK_FRAMES, **knobs)
    return SpeechChain(thinker)


STREAMED: list[bool] = []  # per chain step of _run: both nodes had work


def _run(chain, requests, speaking: set[str]):
    """{request id: (tokens, audio samples or None, finish reason, frames)}; each request's
    outputs end with one finished output."""
    STREAMED.clear()
    for rid, (ids, parts) in requests.items():
        chain.add_request(rid, ids, SamplingParams(
            temperature=0.0, max_tokens=MAX_NEW, speaker="Ethan" if rid in speaking else None),
            tuple(parts))
    tokens, audio, reasons = {r: [] for r in requests}, {r: [] for r in requests}, {}
    frames = {r: [] for r in requests}
    while chain.has_unfinished_requests():
        # the edge streams: the talker runs while the thinker still makes tokens
        STREAMED.append(chain.thinker.has_unfinished_requests()
                        and chain.talker.has_unfinished_requests())
        for out in chain.step():
            assert out.request_id not in reasons  # nothing after its finish
            tokens[out.request_id] += out.new_token_ids
            frames[out.request_id] += out.new_frames or []
            if out.new_audio is not None:
                audio[out.request_id].append(np.frombuffer(out.new_audio.samples, "<f4"))
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    return {r: (tokens[r], np.concatenate(audio[r]) if audio[r] else None, reasons[r],
                frames[r]) for r in requests}


def _check(oracle, requests, got, speaking):
    for rid, (ids, parts) in requests.items():
        tokens, audio, reason, codes = got[rid]
        said, frames, wave = _reference(oracle, ids, parts)
        assert tokens == said and reason in ("stop", "length")
        if rid not in speaking:
            assert audio is None and codes == []
            continue
        assert codes == frames  # the talker's codes, identical
        assert len(frames) > 0 and audio.shape == wave.shape
        # one window (under 300 frames): its samples less the transposed convolutions' cut
        assert len(audio) == len(frames) * SAMPLES_PER_FRAME - CODEC_CUT
        assert np.abs(wave).max() > 0
        assert np.abs(audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_alone_the_text_and_speech_are_the_offline_chains(omni_dir, oracle, make_engine):
    chain = _chain(omni_dir, make_engine)
    requests = _requests(oracle.model.config)
    for rid in requests:  # "text": the talker ends (its end code) before the thinker does;
        # "other": it speaks MAX_FRAMES frames, long after the thinker's end
        one = {rid: requests[rid]}
        _check(oracle, one, _run(chain, one, {rid}), {rid})
        assert any(STREAMED)
    assert chain.thinker.stats().free_blocks == 256 and chain.talker.stats().free_blocks == 256


@pytest.mark.parametrize("continuations", [0, 1024], ids=["serial", "overlapped"])
def test_batched_with_text_only_requests(omni_dir, oracle, make_engine, continuations):
    chain = _chain(omni_dir, make_engine, max_consecutive_spec_steps=continuations)
    requests = _requests(oracle.model.config)
    speaking = {"text", "audio"}
    _check(oracle, requests, _run(chain, requests, speaking), speaking)
    for node in (chain.thinker, chain.talker):
        assert (node.loop.counters.continuations > 0) == (continuations > 0)


@pytest.mark.parametrize("step_tokens", [None, 7], ids=["whole", "chunked"])
def test_under_preemption_in_both_nodes(omni_dir, oracle, make_engine, step_tokens):
    """Budgets that hold both prompts, not both replies, in the thinker and in the talker;
    chunked: 7-token steps cut the clip and the talker's prefill rows."""
    requests = {rid: _requests(oracle.model.config)[rid] for rid in ("other", "audio")}
    thinker_blocks = sum(-(-(len(ids) + 4) // 4) for ids, _ in requests.values())
    knobs = {} if step_tokens is None else dict(max_num_batched_tokens=step_tokens,
                                                max_prefill_chunk_tokens=step_tokens)
    chain = _chain(omni_dir, make_engine, thinker_blocks, TALKER_BLOCKS, **knobs)
    _check(oracle, requests, _run(chain, requests, set(requests)), set(requests))
    # chunked, the thinker's prompts are admitted a chunk at a time and its replies fit
    assert (chain.thinker.scheduler.num_preemptions > 0) == (step_tokens is None)
    assert chain.talker.scheduler.num_preemptions > 0
    assert chain.thinker.stats().free_blocks == thinker_blocks
    assert chain.talker.stats().free_blocks == TALKER_BLOCKS


def test_an_unknown_voice_and_a_model_without_one_are_refused_by_name(
        omni_dir, oracle, make_engine, tiny_model_dir):
    chain = _chain(omni_dir, make_engine)
    ids, _ = _requests(oracle.model.config)["text"]
    with pytest.raises(RequestRejected, match="unknown voice 'nobody'") as err:
        chain.add_request("r", ids, SamplingParams(max_tokens=2, speaker="nobody"))
    assert err.value.param == "speaker"
    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="no audio-out walk") as err:
        engine.add_request("r", [1, 2, 3], SamplingParams(max_tokens=2, speaker="ethan"))
    assert err.value.param == "speaker"


def test_llm_generate_returns_text_and_audio(omni_dir, oracle, device):
    """``mstar.LLM`` runs the chain: a request with ``speaker`` gets its audio beside its
    text; one without is the thinker's text alone."""
    from mstar import LLM

    llm = LLM(str(omni_dir), device=device, dtype="float32", kv_block_size=4,
              num_kv_blocks=256, max_speech_seconds=SPEECH_SECONDS,
              speech_chunk_frames=OMNI_CHUNK_FRAMES, prefill_share_beside_decodes=0.0)
    ids, parts = _requests(oracle.model.config)["other"]
    spoken, plain = llm.generate([{"prompt_token_ids": ids}] * 2, [
        SamplingParams(temperature=0.0, max_tokens=MAX_NEW, speaker="ethan"),
        SamplingParams(temperature=0.0, max_tokens=MAX_NEW)])
    said, frames, wave = _reference(oracle, ids, parts)
    assert spoken.token_ids == plain.token_ids == said[:len(spoken.token_ids)]
    assert spoken.text == plain.text and plain.audio is None
    assert spoken.sample_rate == 24_000 and spoken.audio.shape == wave.shape
    assert np.abs(spoken.audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_an_abort_mid_speech_stops_both_nodes(omni_dir, oracle, make_engine):
    """Aborted once the talker has made frames and the thinker is done: nothing more comes
    out, and every block of both caches is back."""
    chain = _chain(omni_dir, make_engine)
    ids, _ = _requests(oracle.model.config)["other"]
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


def test_a_prompt_without_the_assistant_opening_is_refused_by_name(omni_dir, make_engine):
    chain = _chain(omni_dir, make_engine)
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


def _reference_inputs(oracle: OmniSpeaker, ids, parts):
    """transformers' thinker reply (prompt and reply ids) and its talker rows."""
    model, config = oracle.model, oracle.model.config
    out = thinker_generate(model, ids, parts, MAX_NEW)
    layer = config.talker_config.accept_hidden_layer
    embeds = torch.cat([h[0] for h in out.hidden_states], dim=1)[0]
    hidden = torch.cat([h[layer] for h in out.hidden_states], dim=1)[0]
    said = out.sequences[0].tolist()
    with torch.inference_mode():
        tts = model.thinker.get_input_embeddings()(torch.tensor(
            [config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]))
        return said, talker_inputs(model.talker, config, said, len(ids), embeds, hidden, tts,
                                   config.talker_config.speaker_id["ethan"])


@pytest.mark.parametrize("rid", ["text", "audio", "other"])
def test_the_edge_feeds_transformers_rows(omni_dir, oracle, make_engine, rid):
    """The streaming edge's feed, fed the thinker engine's outputs one by one, holds
    transformers' talker rows (``talker_inputs``): the prefill (user turns, media hidden rows
    through ``hidden_projection``, the speaker's codec row), each step's row, ``tts_eos``, and
    ``pad``; its prefill is made at the first token and the feed finished at the last."""
    from mstar.engine.chain.talker_edge import TalkerEdge, speaker_id

    chain = _chain(omni_dir, make_engine)
    config = oracle.model.config
    ids, parts = _requests(config)[rid]
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
    _, ref = _reference_inputs(oracle, ids, parts)
    for got, want in ((feed.prompt, ref.prompt), (torch.stack(feed.rows), ref.text),
                      (feed.pad, ref.pad)):
        assert got.shape == want.shape
        assert torch.allclose(got, want, rtol=0, atol=ROWS_TOLERANCE * want.abs().max())
