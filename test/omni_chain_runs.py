"""Qwen3-Omni's chained walk on the tiny random model, run and checked against the offline chain
(transformers' thinker, its talker rows, the offline talker loop and codec): what the in-process
chain's tests (test/engine/test_omni_chain.py) and the placed talker's
(test/processes/test_talker_placement.py) share. Float32, greedy."""

from __future__ import annotations

import time

import numpy as np
import torch
from alm_helpers import clip
from omni_helpers import CODEC_CUT, SAMPLES_PER_FRAME, thinker_generate, thinker_prompt

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.speech.omni_speaker import OmniSpeaker
from mstar.models.speech.omni_talker_inputs import talker_inputs

MAX_NEW = 8
SPEECH_SECONDS = 2.4  # the talker's frames bound: 30 frames at 12.5 a second
MAX_FRAMES = 30
# The talker's budget in the preemption test: room for either request alone (up to 31 + 30
# positions) and both prefills (15 and 31 rows), not both replies
TALKER_BLOCKS = 16
WAVE_TOLERANCE = 1e-6  # of the peak, as test/models/test_omni_speech.py states it
# A run's guard against a hang (a talker waiting for a row or a finish that never comes), far
# past a run's few seconds on a loaded machine: not a timing assertion
RUN_DEADLINE_S = 120.0


def omni_oracle(omni_dir) -> OmniSpeaker:
    """The offline chain on the saved model: transformers' whole Qwen3-Omni, float32."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(omni_dir, dtype=torch.float32)
    return OmniSpeaker(model.eval())


def requests_of(config) -> dict[str, tuple[list[int], list]]:
    return {"text": thinker_prompt(config, [40, 41, 42, 43, 44, 45, 46], []),
            "audio": thinker_prompt(config, [11, 12, 13], [clip(3, 1.3)]),
            "other": thinker_prompt(config, [20, 21, 22], [])}


def reference(oracle: OmniSpeaker, ids, parts):
    """(reply tokens, frames [n, K], waveform) of the offline chain: transformers' thinker, its
    rows, the offline talker loop and codec."""
    said, inputs = reference_inputs(oracle.model, ids, parts)
    frames, chunks = [], []
    for frame, ready in oracle.stream(inputs, MAX_FRAMES):
        frames.append(frame.tolist())
        chunks += ready
    return said[len(ids):], frames, np.concatenate(chunks)


STREAMED: list[bool] = []  # per chain step of run_chain: both nodes had work


def run_chain(chain, requests, speaking: set[str]):
    """{request id: (tokens, audio samples or None, finish reason, frames)}; each request's
    outputs end with one finished output."""
    STREAMED.clear()
    for rid, (ids, parts) in requests.items():
        chain.add_request(rid, ids, SamplingParams(
            temperature=0.0, max_tokens=MAX_NEW, speaker="Ethan" if rid in speaking else None),
            tuple(parts))
    tokens, audio, reasons = {r: [] for r in requests}, {r: [] for r in requests}, {}
    frames = {r: [] for r in requests}
    deadline = time.monotonic() + RUN_DEADLINE_S
    while chain.has_unfinished_requests():
        assert time.monotonic() < deadline, f"the chain did not finish {sorted(requests)}"
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


def check_chain(oracle, requests, got, speaking):
    for rid, (ids, parts) in requests.items():
        tokens, audio, reason, codes = got[rid]
        said, frames, wave = reference(oracle, ids, parts)
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


def tts_rows(model) -> torch.Tensor:
    """The thinker's embeddings of tts_bos, tts_eos and tts_pad (the talker's rows read them)."""
    config = model.config
    return model.thinker.get_input_embeddings()(torch.tensor(
        [config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]))


def reference_inputs(model, ids, parts):
    """transformers' thinker reply (prompt and reply ids) and its talker rows (``model``:
    transformers' Qwen3-Omni, ``OmniSpeaker.model``)."""
    config = model.config
    out = thinker_generate(model, ids, parts, MAX_NEW)
    layer = config.talker_config.accept_hidden_layer
    embeds = torch.cat([h[0] for h in out.hidden_states], dim=1)[0]
    hidden = torch.cat([h[layer] for h in out.hidden_states], dim=1)[0]
    said = out.sequences[0].tolist()
    with torch.inference_mode():
        return said, talker_inputs(model.talker, config, said, len(ids), embeds, hidden,
                                   tts_rows(model), config.talker_config.speaker_id["ethan"])
