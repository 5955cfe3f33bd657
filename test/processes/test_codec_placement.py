"""The codec node in a process of its own (MSTAR_ENCODER_PLACEMENT ``codec=process`` for CSM's
Mimi decoder, ``code2wav=process`` for Qwen3-Omni's), through the worker (run on a thread of the
test, ``worker_run``): the frames and the audio are the same as colocated, bit for bit; an abort
frees the request's state in the node's process (its ``held`` count, the worker's
``codec_requests`` gauge); a dead node process fails the worker; and the map is checked against
the model's graph, codec nodes included, before anything starts."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from csm_helpers import PROMPT, save_tiny_csm
from omni_helpers import thinker_prompt
from worker_run import start_worker, stop_worker, wait_done, wait_until

from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds, Invalid, check
from mstar.models.loading.placement_check import encoder_placement_problem
from mstar.settings import WorkerSettings

OTHER = [9, 3, 77, 120, 31, 8, 64, 200, 15, 44, 2]
FRAMES = {"one": 14, "other": 9}
LONG = 200  # frames of the request that is aborted (the tiny CSM makes no end frame)
OMNI_SECONDS = 8.0  # 100 talker frames: the aborted spoken reply is still talking at its abort


def _model_dir(tmp_path, arch: str):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return tmp_path


@pytest.mark.parametrize("placement, arch, message", [
    ("codec=process", "CsmForConditionalGeneration", None),
    ("code2wav=process", "Qwen3OmniMoeForConditionalGeneration", None),
    ("code2wav=process,audio_encoder=process", "Qwen3OmniMoeForConditionalGeneration", None),
    ("code2wav=process", "CsmForConditionalGeneration",
     "places code2wav, not a placeable node.*placeable nodes: codec$"),
    ("vocoder=process", "Qwen3OmniMoeForConditionalGeneration",
     "places vocoder, not a placeable node.*placeable nodes: "
     "audio_encoder, talker, code2wav$"),
])
def test_preflight_places_codec_nodes_and_names_the_others(tmp_path, placement, arch, message):
    problem = encoder_placement_problem(WorkerSettings(encoder_placement=placement),
                                        _model_dir(tmp_path, arch))
    if message is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith("MSTAR_ENCODER_PLACEMENT")
        assert re.search(message, problem), problem


def test_the_codec_messages_are_checked_on_arrival():
    bounds = InboxBounds(replicas=1)
    check(m.CodecFrames(1, [m.RequestFrames("r", [[1, 2], [3, 4]], last=True),
                            m.RequestFrames("s", [[5, 6]])]), bounds)
    check(m.CodecAudio(1, [[bytes(8)], []], 0), bounds)
    for bad, field in [(m.CodecFrames(1, [m.RequestFrames("r", [[1, 2], [3]])]),
                        "requests.frames differ"),
                       (m.CodecFrames(1, [m.RequestFrames("r", [[-1]])]), "requests.frames has"),
                       (m.CodecForget(-1, ["r"]), "call"),
                       (m.CodecAudio(1, [[bytes(8), bytes(6)]], 0), "float32"),
                       (m.CodecAudio(1, [], -1), "held")]:
        with pytest.raises(Invalid, match=field):
            check(bad, bounds)


@pytest.fixture(scope="module")
def tiny_csm(tmp_path_factory, tiny_tokenizer):
    return save_tiny_csm(tmp_path_factory.mktemp("csm"), tiny_tokenizer)


def test_an_engine_refuses_a_map_naming_a_node_its_graph_cannot_place(tiny_csm):
    from mstar import LLM

    with pytest.raises(ValueError, match="^MSTAR_ENCODER_PLACEMENT places vocoder, not a placeable node"
                                         ".*placeable nodes: codec$"):
        LLM(model=str(tiny_csm), device="cpu", encoder_placement="vocoder=process")


def test_a_codec_over_its_memory_bound_stops_its_node_at_load(tiny_csm, capfd):
    """MSTAR_MAX_SPEECH_CODEC_BYTES is checked where the codec is loaded: apart, in the node's
    process, whose exit fails the worker's start."""
    from mstar.ipc.security import instance_security
    from mstar.worker.codec_node import CodecNodeProcess

    settings = WorkerSettings(model=str(tiny_csm), device="cpu", dtype="float32",
                              encoder_placement="codec=process", max_speech_codec_bytes=16)
    with pytest.raises(RuntimeError, match="node codec's process exited"):
        CodecNodeProcess(settings, "codec", instance_security(settings).max_message_bytes)
    assert "MSTAR_MAX_SPEECH_CODEC_BYTES (16)" in capfd.readouterr().err


def _csm_worker(model, device, placement: str):
    return start_worker(WorkerSettings(model=str(model), device=device, dtype="float32",
                                       kv_block_size=4, num_kv_blocks=64,
                                       encoder_placement=placement))


def _speak_csm(channel, thread) -> None:
    """Two requests at once, to their ends."""
    for rid, ids in (("one", PROMPT), ("other", OTHER)):
        channel.inbox.put(m.AddRequest(rid, ids, SamplingParams(max_tokens=FRAMES[rid],
                                                                temperature=0.0)))
    wait_done(channel, FRAMES, thread)


def _abort_mid_speech(worker, channel, thread, rid: str, ids: list[int],
                      params: SamplingParams) -> None:
    """Start ``rid``, abort it once its first frames went through the codec node: it never
    finishes, and the node holds no state (the worker's gauge says so too)."""
    channel.inbox.put(m.AddRequest(rid, ids, params))
    wait_until(lambda: channel.frames.get(rid) and worker.codec.held == 1, "no frames", thread)
    channel.inbox.put(m.AbortRequests([rid]))
    wait_until(lambda: worker.codec.held == 0 and not worker.steps.has_unfinished_requests(),
               "the codec node kept the aborted request's state", thread, timeout=30)
    wait_until(lambda: channel.stats and channel.stats[-1].codec_requests == 0, "no gauge",
               thread, timeout=30)
    assert rid not in channel.done  # aborted, not finished


# the worker's thread ends in the dead node's RuntimeError, on purpose
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_csm_speaks_the_same_with_its_codec_apart(tiny_csm, device):
    worker, here, thread = _csm_worker(tiny_csm, device, "")
    try:
        _speak_csm(here, thread)
    finally:
        stop_worker(here, thread)
    worker, apart, thread = _csm_worker(tiny_csm, device, "codec=process")
    try:
        _speak_csm(apart, thread)
        assert max(s.codec_requests for s in apart.stats) >= 1  # the node's count, reported
        # one call a step for both requests' frames (queued together while the worker loaded),
        # not one per request: 14 steps, not 14 + 9
        assert worker.codec.calls <= FRAMES["one"] + 2
        _abort_mid_speech(worker, apart, thread, "gone", PROMPT,
                          SamplingParams(max_tokens=LONG, temperature=0.0))
        node = worker.codec.proc
        node.kill()  # a dead codec node fails the worker (its requests then fail: 503)
        node.wait()
        apart.inbox.put(m.AddRequest("late", PROMPT, SamplingParams(max_tokens=4)))
        thread.join(60)
        assert not thread.is_alive() and "late" not in apart.done
    finally:
        stop_worker(apart, thread)
    assert not worker.codec.dir.exists()  # closed with the worker
    for rid, frames in FRAMES.items():
        assert len(here.frames[rid]) == frames
        assert apart.frames[rid] == here.frames[rid]
        assert here.done[rid] == apart.done[rid] == "length"
        colocated = here.joined_audio(rid)
        assert colocated.size > 0 and np.array_equal(apart.joined_audio(rid), colocated)



def test_qwen3_omni_speaks_the_same_with_code2wav_apart(omni_thinker_dir, device):
    from transformers import AutoConfig

    from mstar import LLM

    knobs = dict(device=device, dtype="float32", kv_block_size=4, num_kv_blocks=256,
                 max_speech_seconds=OMNI_SECONDS, prefill_share_beside_decodes=0.0)
    ids, _ = thinker_prompt(AutoConfig.from_pretrained(omni_thinker_dir), [20, 21, 22], [])
    params = SamplingParams(temperature=0.0, max_tokens=8, speaker="ethan")
    worker, channel, thread = start_worker(WorkerSettings(
        model=str(omni_thinker_dir), encoder_placement="code2wav=process", **knobs))
    try:
        channel.inbox.put(m.AddRequest("spoken", ids, params))
        channel.inbox.put(m.AddRequest("twin", ids, params))
        wait_done(channel, ["spoken", "twin"], thread)
        # one codec call a talker step for both requests' frames, not one per request
        assert worker.codec.calls <= len(channel.frames["spoken"]) + 3
        _abort_mid_speech(worker, channel, thread, "gone", ids, params)
    finally:
        stop_worker(channel, thread)
    chain = LLM(str(omni_thinker_dir), **knobs).chain  # colocated: code2wav in this process
    chain.add_request("spoken", ids, params)
    tokens, frames, audio = [], [], []
    while chain.has_unfinished_requests():
        for out in chain.step():
            tokens += out.new_token_ids
            frames += out.new_frames or []
            if out.new_audio is not None:
                audio.append(np.frombuffer(out.new_audio.samples, "<f4"))
    assert channel.tokens["spoken"] == tokens and channel.frames["spoken"] == frames
    assert channel.frames["twin"] == frames
    assert len(frames) > 0 and np.array_equal(channel.joined_audio("spoken"),
                                              np.concatenate(audio))
