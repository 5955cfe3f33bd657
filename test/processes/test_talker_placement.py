"""MSTAR_ENCODER_PLACEMENT ``talker=process``: Qwen3-Omni's talker in a process of its own
(``mstar.worker.talker_node``), driven by the chained walk through its handle. On the tiny random
model, float32, greedy, the text tokens and the talker's codes are the offline chain's (so the
colocated chain's, which test/engine/test_omni_chain.py holds to the same), and the waveform is
within WAVE_TOLERANCE (1e-6 of the peak) of the offline codec's: code2wav stays in the worker and
reads the same codes. Alone, batched with text-only requests, and under preemption in the placed
talker (MSTAR_TALKER_NUM_KV_BLOCKS); an abort mid-speech frees its blocks (through the chain's
stats, as /metrics reads them); a dead talker process fails the chain's step; a model without a
talker refuses the map at start, naming the knob."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
import torch
from omni_chain_runs import (
    MAX_NEW,
    SPEECH_SECONDS,
    TALKER_BLOCKS,
    check_chain,
    requests_of,
    run_chain,
)
from worker_run import Channel

from mstar.engine.chain.speech_chain import SpeechChain
from mstar.engine.request.sampling_params import SamplingParams
from mstar.graph.speech import OMNI_CHUNK_FRAMES
from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds, Invalid, check
from mstar.ipc.parts import WireTensor
from mstar.ipc.security import instance_security
from mstar.models.loading.placement_check import encoder_placement_problem
from mstar.settings import WorkerSettings

PLACED = "talker=process"
STATS_WAIT_S = 30.0  # the process's load after an abort arrives well within it




@pytest.fixture
def placed_chain(omni_thinker_dir, make_engine):
    """Factory: a chain whose talker runs in a process of its own (stopped after the test)."""
    from mstar.worker.talker_node import TalkerNodeProcess

    chains = []

    def make(talker_blocks=256, thinker_blocks=256, **knobs) -> SpeechChain:
        thinker = make_engine(omni_thinker_dir, kv_block_size=4, num_kv_blocks=thinker_blocks,
                              enable_prefix_caching=False, max_speech_seconds=SPEECH_SECONDS,
                              talker_num_kv_blocks=talker_blocks,
                              speech_chunk_frames=OMNI_CHUNK_FRAMES, encoder_placement=PLACED,
                              **knobs)
        talker = TalkerNodeProcess(thinker.settings, thinker.model_runner.entry.talker,
                                   instance_security(thinker.settings).max_message_bytes)
        chains.append(SpeechChain(thinker, talker=talker))
        return chains[-1]

    yield make
    for chain in chains:
        chain.shutdown()
        assert chain.talker.proc.poll() is not None and not chain.talker.dir.exists()


def _stats_until(node, holds):
    """The chain's (or its talker's) stats once ``holds(stats)``: the placed talker's load
    arrives as it may."""
    deadline = time.monotonic() + STATS_WAIT_S
    while not holds(stats := node.stats()):
        assert time.monotonic() < deadline, stats
        time.sleep(0.01)
    return stats


def test_alone_and_batched_the_placed_talker_speaks_as_the_offline_chain(
        omni_thinker_dir, omni_speaker, placed_chain):
    chain = placed_chain()
    assert chain.talker.num_blocks == 256 and chain.talker.device == torch.device("cpu")
    requests = requests_of(omni_speaker.model.config)
    one = {"other": requests["other"]}  # it speaks long after the thinker's end
    check_chain(omni_speaker, one, run_chain(chain, one, set(one)), set(one))
    speaking = {"text", "audio"}  # "other" is a text-only request beside them
    check_chain(omni_speaker, requests, run_chain(chain, requests, speaking), speaking)
    idle = _stats_until(chain, lambda s: s.free_blocks == 512)
    assert (idle.running, idle.waiting, idle.kv_cache_usage) == (0, 0, 0.0)


def test_under_preemption_in_the_placed_talker(omni_thinker_dir, omni_speaker, placed_chain):
    """The talker's budget holds both prefills, not both replies (as the colocated test)."""
    requests = {rid: requests_of(omni_speaker.model.config)[rid] for rid in ("other", "audio")}
    chain = placed_chain(talker_blocks=TALKER_BLOCKS)
    check_chain(omni_speaker, requests, run_chain(chain, requests, set(requests)), set(requests))
    stats = _stats_until(chain, lambda s: s.free_blocks == 256 + TALKER_BLOCKS)
    assert chain.talker.load.preemptions > 0 and stats.preemptions > 0


@pytest.mark.parametrize("thinking", [True, False], ids=["mid-text", "after-text"])
def test_an_abort_mid_speech_frees_the_placed_talkers_blocks(omni_thinker_dir, omni_speaker, placed_chain,
                                                             thinking):
    """Aborted once the placed talker holds blocks: while the thinker still speaks (the talker's
    feed is not finished, so only the abort can end its request there) or once the talker has
    made frames after the thinker's end. Nothing more comes out; every block comes back."""
    chain = placed_chain()
    ids, _ = requests_of(omni_speaker.model.config)["other"]
    chain.add_request("r", ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                               speaker="ethan"))
    frames = 0
    while not (chain.talker.has_unfinished_requests() and (
            chain.thinker.has_unfinished_requests() if thinking else
            frames and not chain.thinker.has_unfinished_requests())):
        outs = chain.step()
        assert not any(out.finished for out in outs)
        frames += sum(len(out.new_frames or []) for out in outs)
    talking = _stats_until(chain.talker, lambda s: s.free_blocks < 256)  # its prefill ran
    speaking = chain.stats()  # the worker's gauges count the placed talker's blocks
    assert talking.running == 1 and speaking.free_blocks <= talking.free_blocks + 256
    chain.abort_request("r")
    steps = 0
    while chain.has_unfinished_requests():  # a thinker step in flight may still end
        assert chain.step() == []
        steps += 1
    assert steps <= 1 and chain.step() == []
    idle = _stats_until(chain, lambda s: s.free_blocks == 512)
    assert (idle.running, idle.waiting, idle.kv_cache_usage) == (0, 0, 0.0)


def test_a_dead_talker_process_fails_the_chains_step(omni_thinker_dir, omni_speaker, placed_chain):
    chain = placed_chain()
    ids, _ = requests_of(omni_speaker.model.config)["other"]
    chain.add_request("r", ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                               speaker="ethan"))
    while not chain.talker.has_unfinished_requests():
        chain.step()
    chain.talker.proc.kill()
    chain.talker.proc.wait()
    with pytest.raises(RuntimeError, match="node talker's process exited"):
        for _ in range(1000):
            chain.step()


def test_a_dead_talker_process_fails_the_workers_step(omni_thinker_dir, device):
    """The worker's loop raises (its process ends: the API server answers its requests 503, as
    for any dead worker), its thinker and its talker handle shut down."""
    from mstar.worker.worker import Worker

    settings = WorkerSettings(model=str(omni_thinker_dir), device=device, dtype="float32",
                              kv_block_size=4, num_kv_blocks=256, encoder_placement=PLACED,
                              max_speech_seconds=SPEECH_SECONDS,
                              speech_chunk_frames=OMNI_CHUNK_FRAMES)
    channel = Channel(settings)
    worker = Worker(settings, 0, channel)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except RuntimeError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ids, _ = requests_of(worker_config(omni_thinker_dir))["other"]
    channel.inbox.put(m.AddRequest("r", ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                                            speaker="ethan")))
    deadline = time.monotonic() + STATS_WAIT_S
    while not channel.tokens.get("r"):  # the thinker's first token: the talker's request follows
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.005)
    worker.steps.talker.proc.kill()
    thread.join(STATS_WAIT_S)
    assert not thread.is_alive()
    assert len(failed) == 1 and "node talker's process exited" in str(failed[0])


def worker_config(omni_thinker_dir):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(omni_thinker_dir)


def _model_dir(tmp_path, arch: str):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return tmp_path


@pytest.mark.parametrize("placement, arch, message", [
    (PLACED, "Qwen3OmniMoeForConditionalGeneration", None),
    (f"audio_encoder=process,{PLACED}", "Qwen3OmniMoeForConditionalGeneration", None),
    (PLACED, "LlamaForCausalLM", "places talker, not a placeable node.*none"),
    (PLACED, "Qwen3OmniMoeTalkerForConditionalGeneration", "places talker, not a placeable"),
    ("thinker=process", "Qwen3OmniMoeForConditionalGeneration",
     "places thinker.*placeable nodes: audio_encoder, talker"),
])
def test_preflight_places_the_talker_of_a_model_that_has_one(tmp_path, placement, arch,
                                                            message):
    problem = encoder_placement_problem(WorkerSettings(encoder_placement=placement),
                                        _model_dir(tmp_path, arch))
    if message is None:
        assert problem is None
    else:
        assert problem is not None and problem.startswith("MSTAR_ENCODER_PLACEMENT"), problem
        assert re.search(message, problem), problem


def test_a_model_without_a_talker_fails_at_start_naming_the_knob(tiny_model_dir, make_engine):
    with pytest.raises(ValueError, match="MSTAR_ENCODER_PLACEMENT places talker"):
        make_engine(tiny_model_dir("llama"), num_kv_blocks=64, encoder_placement=PLACED)


def test_the_talker_messages_are_checked_on_arrival():
    bounds = InboxBounds(replicas=1)
    rows = WireTensor("float32", [2, 3], bytes(24))
    check(m.TalkerAdd("r", rows, WireTensor("float32", [3], bytes(12)),
                      SamplingParams(max_tokens=4)), bounds)
    check(m.TalkerRows("r", WireTensor("float32", [0, 3], b""), finished=True), bounds)
    check(m.TalkerOutputs([], 0, 0, 16, 0), bounds)
    for bad, field in [(m.TalkerRows("r", WireTensor("float32", [2, 3], bytes(8))), "rows"),
                       (m.TalkerRows("r", WireTensor("float32", [1, 1, 3], bytes(12))),
                        "rows.shape"),
                       (m.TalkerAbort("x" * 300), "request_id"),
                       (m.TalkerAdd("r", rows, WireTensor("float32", [2], bytes(8)),
                                    SamplingParams(max_tokens=4)), "width"),
                       (m.TalkerOutputs([], 0, 0, -1, 0), "free_blocks")]:
        with pytest.raises(Invalid, match=field):
            check(bad, bounds)
