"""The worker runs Qwen3-Omni's chained walk (``mstar.worker.speech_out.speech_chain``): a request
with ``speaker`` sent as an ``AddRequest`` comes back as ``Outputs`` whose tokens are the
in-process chain's and whose ``new_audio`` chunks, joined, are its waveform; a request without
``speaker`` gets text alone; an abort ends it in both engines (no output after a finish, every
block of both caches back, as the worker's gauges say). With the talker colocated and in a
process of its own (MSTAR_ENCODER_PLACEMENT ``talker=process``), which stops with the worker."""

from __future__ import annotations

import time

import numpy as np
import pytest
from omni_helpers import thinker_prompt
from worker_run import start_worker, stop_worker, wait_done

from mstar.engine.request.sampling_params import SamplingParams
from mstar.graph.speech import OMNI_CHUNK_FRAMES
from mstar.ipc import messages as m
from mstar.settings import WorkerSettings

SPEECH_SECONDS = 2.4
MAX_NEW = 8



def _worker(omni_thinker_dir, device, placement):
    settings = WorkerSettings(model=str(omni_thinker_dir), device=device, dtype="float32",
                              encoder_placement=placement,
                              kv_block_size=4, num_kv_blocks=256,
                              max_speech_seconds=SPEECH_SECONDS,
                              speech_chunk_frames=OMNI_CHUNK_FRAMES,  # the oracle's windows
                              prefill_share_beside_decodes=0.0)
    return start_worker(settings)


@pytest.mark.parametrize("placement", ["", "talker=process"], ids=["colocated", "apart"])
def test_the_worker_speaks_as_the_chain_and_aborts_in_both_engines(omni_thinker_dir, device, placement):
    from mstar import LLM

    worker, channel, thread = _worker(omni_thinker_dir, device, placement)
    try:
        config = worker_config(omni_thinker_dir)
        ids, _ = thinker_prompt(config, [20, 21, 22], [])
        params = dict(temperature=0.0, max_tokens=MAX_NEW)
        channel.inbox.put(m.AddRequest("spoken", ids, SamplingParams(**params, speaker="ethan")))
        channel.inbox.put(m.AddRequest("plain", ids, SamplingParams(**params)))
        wait_done(channel, ["spoken", "plain"], thread)
        channel.inbox.put(m.AddRequest("gone", ids, SamplingParams(**params, speaker="ethan")))
        while not channel.tokens.get("gone"):  # the thinker has started; the talker follows
            time.sleep(0.005)
        channel.inbox.put(m.AbortRequests(["gone"]))
        deadline = time.monotonic() + 30
        while not _idle(channel.stats):  # every block of both caches back (/metrics)
            assert time.monotonic() < deadline, channel.stats[-1:]
            time.sleep(0.01)
    finally:
        stop_worker(channel, thread)
    if placement:  # the talker's process stopped with the worker
        assert worker.steps.talker.proc.poll() is not None
    # (whether "gone" finished before its abort arrived depends on the machine's speed; the
    # in-process test aborts at a chosen step)
    assert not thread.is_alive() and not channel.after_done
    llm = LLM(str(omni_thinker_dir), device=device, dtype="float32", kv_block_size=4,
              num_kv_blocks=256, max_speech_seconds=SPEECH_SECONDS,
              speech_chunk_frames=OMNI_CHUNK_FRAMES, prefill_share_beside_decodes=0.0)
    (ref,) = llm.generate({"prompt_token_ids": ids}, SamplingParams(**params, speaker="ethan"))
    assert channel.tokens["spoken"] == channel.tokens["plain"]
    assert "plain" not in channel.audio
    assert channel.tokens["spoken"][:len(ref.token_ids)] == ref.token_ids
    audio = np.concatenate(channel.audio["spoken"])
    assert audio.shape == ref.audio.shape and np.array_equal(audio, ref.audio)


def _idle(stats: list[m.WorkerStats]) -> bool:
    """The worker's latest gauges say no request and no block held."""
    return bool(stats) and (stats[-1].running, stats[-1].waiting, stats[-1].kv_cache_usage) == (0, 0, 0)


def worker_config(omni_thinker_dir):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(omni_thinker_dir)


