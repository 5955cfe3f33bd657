"""Qwen3-Omni's talker in mstar's engine (the Qwen3-MoE family with a shared expert over the paged
KV cache, the code predictor as the runner's frame head, the request's embedding rows as a
``RowFeed``): on a tiny random Qwen3-Omni, float32, greedy, the frames are the offline
``TalkerFrames``' (which test/models/test_omni_talker.py holds equal to transformers' talker
``generate``), alone, batched with another request of other inputs (serial and overlapped
loop), under preemption, and at an early end code; code2wav sounds them as offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from media_runs import preempting_blocks
from omni_helpers import save_talker_node, save_tiny_omni, talker_inputs, talker_reference

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.speech.omni_talker import TalkerFrames, load_talker
from mstar.models.speech.row_feed import RowFeed
from mstar.prompt.value import Prompt

MAX_FRAMES = 30
# (seed, prompt rows, text rows): "long" runs MAX_FRAMES frames; "ends" meets the end code after
# 11; "other" is another length of prompt and of text (its pad rows start after 5 frames)
INPUTS = {"long": (1, 9, 12), "ends": (4, 9, 12), "other": (2, 6, 5)}
# The talker's shared experts drawn at a gain that makes them count (omni_helpers): at
# transformers' init, dropping the shared expert's gate leaves the greedy codes unchanged.
SHARED_EXPERT_GAIN = 1.0


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory, tiny_tokenizer):
    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer,
                          shared_expert_gain=SHARED_EXPERT_GAIN)


@pytest.fixture(scope="module")
def talker_node(tiny_omni, tmp_path_factory):
    return save_talker_node(tiny_omni, tmp_path_factory.mktemp("talker"))


@pytest.fixture(scope="module")
def offline(tiny_omni):
    return TalkerFrames(load_talker(tiny_omni))


def _inputs(offline, rid: str):
    seed, prompt_len, text_len = INPUTS[rid]
    return talker_inputs(offline.talker.config, seed, prompt_len, text_len)


def _expected(offline, rid: str) -> list[list[int]]:
    return [f.tolist() for f in offline.frames(*_inputs(offline, rid), MAX_FRAMES)]


def _speak(engine, offline, rids: list[str]) -> dict[str, tuple[list, list, str]]:
    """Add every request (all its rows up front), step to the end: (frames, tokens, finish
    reason) per request."""
    for rid in rids:
        prompt = Prompt.of_feed(RowFeed.whole(*_inputs(offline, rid)))
        engine.add_request(rid, prompt.token_ids,
                           SamplingParams(max_tokens=MAX_FRAMES, temperature=0.0), prompt.parts,
                           feed=prompt.feed)
    frames, tokens, reasons = {rid: [] for rid in rids}, {rid: [] for rid in rids}, {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            frames[out.request_id] += out.new_frames or []
            tokens[out.request_id] += out.new_token_ids
            if out.finished:
                reasons[out.request_id] = out.finish_reason
    return {rid: (frames[rid], tokens[rid], reasons[rid]) for rid in rids}


def _check(got, offline, rid: str) -> None:
    frames, tokens, reason = got[rid]
    expected = _expected(offline, rid)
    assert frames == expected
    codes0 = [f[0] for f in expected]  # each token is its frame's code 0, then the end id
    if len(expected) < MAX_FRAMES:
        assert (tokens, reason) == (codes0 + [offline.end_code], "stop")
    else:
        assert (tokens, reason) == (codes0, "length")


def test_alone_the_frames_are_the_offline_talkers(talker_node, offline, make_engine):
    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64)
    got = _speak(engine, offline, ["long"])
    _check(got, offline, "long")
    assert len({tuple(f) for f in got["long"][0]}) >= 10  # not one frame repeated
    # the offline loop is transformers' talker generate on this model too
    reference = talker_reference(offline.talker, *_inputs(offline, "long"), MAX_FRAMES)
    assert reference.tolist() == got["long"][0]


def test_an_end_code_finishes_the_request(talker_node, offline, make_engine):
    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64)
    got = _speak(engine, offline, ["ends"])
    _check(got, offline, "ends")
    assert 0 < len(got["ends"][0]) < MAX_FRAMES


def test_one_after_another_no_cached_prefix_crosses_feeds(talker_node, offline, make_engine):
    """Prefix caching on: two requests of the same number of prompt rows (the same placeholder
    ids) with other rows, one after the other, each get their own frames; the same rows again
    reuse the first's cached blocks."""
    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64,
                         enable_prefix_caching=True)
    for rid in ("long", "ends"):
        _check(_speak(engine, offline, [rid]), offline, rid)
    prompt = Prompt.of_feed(RowFeed.whole(*_inputs(offline, "long")))
    engine.add_request("again", prompt.token_ids, SamplingParams(max_tokens=1, temperature=0.0),
                       feed=prompt.feed)
    (out,) = engine.step()
    assert out.new_frames == _expected(offline, "long")[:1] and out.finished
    assert out.num_cached_tokens == 8  # its 9 prompt rows' first two blocks


@pytest.mark.parametrize("continuations", [0, 1024], ids=["serial", "overlapped"])
def test_batched_with_other_inputs(talker_node, offline, make_engine, continuations):
    """Overlapped: a continuation row's input is the frame the step before it makes (and an
    ended request's stand-in frame is never an output)."""
    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64,
                         max_consecutive_spec_steps=continuations)
    got = _speak(engine, offline, ["long", "ends", "other"])
    for rid in INPUTS:
        _check(got, offline, rid)
    assert (engine.loop.counters.continuations > 0) == (continuations > 0)


@pytest.mark.parametrize("step_tokens", [None, 5], ids=["whole", "chunked"])
def test_under_preemption_the_frames_resume(talker_node, offline, make_engine, step_tokens):
    """The preempted request's recompute reads its prefill rows and its frames so far (each
    plus its step's text row); chunked, its chunks cut across the prompt's end."""
    lens = {"one": INPUTS["long"][1], "other": INPUTS["other"][1]}
    blocks = preempting_blocks(lens, MAX_FRAMES)
    knobs = {} if step_tokens is None else dict(max_num_batched_tokens=step_tokens,
                                                max_prefill_chunk_tokens=step_tokens)
    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False, **knobs)
    got = _speak(engine, offline, ["long", "other"])
    assert engine.scheduler.num_preemptions > 0
    for rid in ("long", "other"):
        _check(got, offline, rid)


@pytest.mark.parametrize("loop", ["serial", "overlapped", "preempted"])
def test_a_growing_feed_waits_for_its_rows(talker_node, offline, make_engine, loop):
    """Rows arrive one every ``every`` engine steps (as the thinker's tokens would), then the
    feed finishes: the request is scheduled only for positions whose row has arrived (frame
    ``j`` is made after row ``j - 1``), beside a request that has all its rows, and its frames
    are the offline ones. Preempted (a KV budget that cannot hold both, the waiting request the
    newer): no row arrives from its preemption until the step after the other request ends,
    when it comes back with a frame whose row has not arrived: its recompute stops before that
    position."""
    every = 3
    knobs = dict(num_kv_blocks=64, max_consecutive_spec_steps=1024 if loop == "overlapped" else 0)
    if loop == "preempted":
        lens = {"one": INPUTS["long"][1], "other": INPUTS["other"][1]}
        knobs.update(num_kv_blocks=preempting_blocks(lens, MAX_FRAMES), enable_prefix_caching=False)
    engine = make_engine(talker_node, kv_block_size=4, **knobs)
    prompt, text, pad = _inputs(offline, "long")
    feed = RowFeed(prompt, pad)
    params = SamplingParams(max_tokens=MAX_FRAMES, temperature=0.0)
    other = RowFeed.whole(*_inputs(offline, "other"))
    engine.add_request("other", other.placeholder_ids(), params, feed=other)
    engine.add_request("long", feed.placeholder_ids(), params, feed=feed)
    frames, step, waited, resumed = {"long": [], "other": []}, 0, 0, None
    while engine.has_unfinished_requests():
        held = engine.scheduler.num_preemptions > 0 and (resumed is None or step <= resumed)
        if step % every == 0 and not feed.finished and not held:
            arrived = len(feed.rows)
            if arrived < len(text):
                feed.append(text[arrived:arrived + 1])
            else:
                feed.finish()
        made = len(frames["long"])
        for out in engine.step():
            frames[out.request_id] += out.new_frames or []
            if out.finished and out.request_id == "other":
                resumed = step + 1  # the step that admits "long" again
        waited += not feed.finished and len(frames["long"]) == made
        assert len(frames["long"]) <= len(feed.rows) + 1 or feed.finished
        step += 1
    assert frames == {rid: _expected(offline, rid) for rid in ("long", "other")}
    assert waited > len(text)  # steps that made no frame of it while it waited for rows
    assert (engine.scheduler.num_preemptions > 0) == (loop == "preempted")


def test_a_request_without_its_rows_is_refused(talker_node, offline, make_engine):
    from mstar.engine.request.errors import RequestRejected

    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="needs its embedding rows"):
        engine.add_request("bare", [0] * 9, SamplingParams(max_tokens=4))
    feed = RowFeed.whole(*_inputs(offline, "long"))
    with pytest.raises(RequestRejected, match="9 prompt rows for 8 prompt positions"):
        engine.add_request("short", [0] * 8, SamplingParams(max_tokens=4), feed=feed)


WAVE_TOLERANCE = 1e-6  # of the peak, as test/models/test_omni_speech.py states it


def test_code2wav_sounds_the_engines_frames_as_offline(tiny_omni, talker_node, offline,
                                                       make_engine):
    """The engine's frames through code2wav's windows (the codec node's stream) against the
    offline frames' samples."""
    from mstar.models.speech.omni_code2wav import Code2Wav

    engine = make_engine(talker_node, kv_block_size=4, num_kv_blocks=64)
    frames = _speak(engine, offline, ["long"])["long"][0]
    code2wav = Code2Wav.load(tiny_omni)
    stream = code2wav.stream()
    audio = np.concatenate([c for f in frames for c in stream.push(torch.tensor(f))]
                           + stream.finish())
    wave = code2wav.decode(torch.tensor(_expected(offline, "long")))
    assert audio.shape == wave.shape and np.abs(wave).max() > 0
    assert np.abs(audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


@pytest.mark.parametrize("normalize", [False, True], ids=["raw_top_k", "renormalised"])
def test_the_moe_block_is_the_talkers(normalize):
    """mstar's ``SparseMoeBlock`` with a shared expert, given transformers' talker MoE block's
    weights (per expert, as a checkpoint keeps them), computes its output; the router
    renormalises the top-k weights only when the config says."""
    from omni_helpers import omni_config
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeTalkerTextSparseMoeBlock,
    )

    from mstar.models.layers.moe import SparseMoeBlock

    config = omni_config(64).talker_config.text_config
    config.norm_topk_prob = normalize
    torch.manual_seed(0)
    theirs = Qwen3OmniMoeTalkerTextSparseMoeBlock(config).eval()
    with torch.no_grad():
        for param in theirs.parameters():
            param.normal_(0.0, 1.0 / param.shape[-1] ** 0.5)
    ours = SparseMoeBlock(config.hidden_size, config.moe_intermediate_size, config.num_experts,
                          config.num_experts_per_tok, normalize,
                          config.shared_expert_intermediate_size)
    inter = config.moe_intermediate_size
    state = {"gate.weight": theirs.gate.weight,
             "shared_expert_gate.weight": theirs.shared_expert_gate.weight}
    state |= {f"shared_expert.{name}": p for name, p in theirs.shared_expert.named_parameters()}
    for e in range(config.num_experts):
        gate_up = theirs.experts.gate_up_proj[e]
        state |= {f"experts.{e}.gate_proj.weight": gate_up[:inter],
                  f"experts.{e}.up_proj.weight": gate_up[inter:],
                  f"experts.{e}.down_proj.weight": theirs.experts.down_proj[e]}
    ours.load_state_dict(state)
    x = torch.randn(1, 7, config.hidden_size)
    with torch.no_grad():
        expected = theirs(x)[0]
        got = ours(x[0])
        without_shared = SparseMoeBlock(config.hidden_size, inter, config.num_experts,
                                        config.num_experts_per_tok, normalize)
        without_shared.load_state_dict({k: v for k, v in state.items() if "shared" not in k})
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(without_shared(x[0]), expected, atol=1e-3)  # the shared expert counts
