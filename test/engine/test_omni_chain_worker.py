"""The worker runs Qwen3-Omni's chained walk (``mstar.worker.speech_out.speech_chain``): a request
with ``speaker`` sent as an ``AddRequest`` comes back as ``Outputs`` whose tokens are the
in-process chain's and whose ``new_audio`` chunks, joined, are its waveform; a request without
``speaker`` gets text alone; an abort ends it in both engines (no output after a finish, every
block of both caches back)."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest
from omni_helpers import save_tiny_thinker, thinker_prompt

from mstar.engine.request.sampling_params import SamplingParams
from mstar.graph.speech import OMNI_CHUNK_FRAMES
from mstar.ipc import messages as m
from mstar.settings import WorkerSettings
from mstar.worker.worker import Worker

SPEECH_SECONDS = 2.4
MAX_NEW = 8


class Channel:
    """The worker's sockets in process: commands queued in, outputs collected."""

    def __init__(self):
        self.inbox: queue.Queue = queue.Queue()
        self.tokens: dict[str, list[int]] = {}
        self.audio: dict[str, list[np.ndarray]] = {}
        self.done: dict[str, str] = {}
        self.after_done: list[str] = []

    def receive(self, timeout_ms: int):
        try:
            msgs = [self.inbox.get(timeout=timeout_ms / 1000) if timeout_ms else
                    self.inbox.get_nowait()]
        except queue.Empty:
            return []
        return [m.decode(m.encode(msg)) for msg in msgs]

    def admit_model(self, vocab_size, max_model_len):
        pass

    def send_to_conductor(self, msg):
        pass

    def send_to_api(self, msg):
        msg = m.decode(m.encode(msg))  # as typed as off a socket
        if isinstance(msg, m.Outputs):
            for out in msg.outputs:
                if out.request_id in self.done:
                    self.after_done.append(out.request_id)
                self.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
                if out.new_audio is not None:
                    self.audio.setdefault(out.request_id, []).append(
                        np.frombuffer(out.new_audio.samples, "<f4"))
                if out.finished:
                    self.done[out.request_id] = out.finish_reason


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_thinker(tmp_path_factory.mktemp("omni-chain-worker"), tiny_tokenizer)


def _worker(omni_dir, device):
    settings = WorkerSettings(model=str(omni_dir), device=device, dtype="float32",
                              kv_block_size=4, num_kv_blocks=256,
                              max_speech_seconds=SPEECH_SECONDS,
                              speech_chunk_frames=OMNI_CHUNK_FRAMES,  # the oracle's windows
                              prefill_share_beside_decodes=0.0)
    channel = Channel()
    worker = Worker(settings, 0, channel)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, channel, thread


def _wait(channel, rids, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not set(rids) <= set(channel.done):
        assert time.monotonic() < deadline, "requests did not finish"
        time.sleep(0.01)


def test_the_worker_speaks_as_the_chain_and_aborts_in_both_engines(omni_dir, device):
    from mstar import LLM

    worker, channel, thread = _worker(omni_dir, device)
    try:
        config = worker_config(omni_dir)
        ids, _ = thinker_prompt(config, [20, 21, 22], [])
        params = dict(temperature=0.0, max_tokens=MAX_NEW)
        channel.inbox.put(m.AddRequest("spoken", ids, SamplingParams(**params, speaker="ethan")))
        channel.inbox.put(m.AddRequest("plain", ids, SamplingParams(**params)))
        _wait(channel, ["spoken", "plain"])
        channel.inbox.put(m.AddRequest("gone", ids, SamplingParams(**params, speaker="ethan")))
        while not channel.tokens.get("gone"):  # the thinker has started; the talker follows
            time.sleep(0.005)
        channel.inbox.put(m.AbortRequests(["gone"]))
        deadline = time.monotonic() + 30
        while worker.steps.has_unfinished_requests():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert worker.steps.thinker.stats().free_blocks == 256
        assert worker.steps.talker.stats().free_blocks == 256
    finally:
        channel.inbox.put(m.Shutdown("test"))
        thread.join(30)
    # (whether "gone" finished before its abort arrived depends on the machine's speed; the
    # in-process test aborts at a chosen step)
    assert not thread.is_alive() and not channel.after_done
    llm = LLM(str(omni_dir), device=device, dtype="float32", kv_block_size=4,
              num_kv_blocks=256, max_speech_seconds=SPEECH_SECONDS,
              speech_chunk_frames=OMNI_CHUNK_FRAMES, prefill_share_beside_decodes=0.0)
    (ref,) = llm.generate({"prompt_token_ids": ids}, SamplingParams(**params, speaker="ethan"))
    assert channel.tokens["spoken"] == channel.tokens["plain"]
    assert "plain" not in channel.audio
    assert channel.tokens["spoken"][:len(ref.token_ids)] == ref.token_ids
    audio = np.concatenate(channel.audio["spoken"])
    assert audio.shape == ref.audio.shape and np.array_equal(audio, ref.audio)


def worker_config(omni_dir):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(omni_dir)


