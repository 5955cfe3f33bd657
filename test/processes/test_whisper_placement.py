"""Whisper's audio encoder is a node of its walk graph like any other: the runner calls it through
``EncoderNodes`` (its output then projected to the kept cross-attention states), so
MSTAR_ENCODER_PLACEMENT can put it in a process of its own. Greedy tokens are the same token for
token colocated and apart (and transformers'), and each distinct clip crosses the transport once."""

from __future__ import annotations

import pytest
from whisper_helpers import clip, generation_config, hf_greedy, make_whisper_dir

from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

MAX_NEW = 10
PLACED = "audio_encoder=process"
CLIPS = {"a": (440, 0), "b": (660, 2), "a2": (440, 0)}  # a2: a's audio again (cached states)


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return make_whisper_dir(tmp_path_factory.mktemp("tiny-whisper"))


@pytest.fixture(scope="module")
def requests(whisper_dir):
    """name -> (decoder prompt, AudioInput)."""
    from transformers import WhisperFeatureExtractor

    from mstar.models.audio.whisper_features import whisper_input
    from mstar.prompt.transcription import WhisperTokens, decoder_prompt

    fe = WhisperFeatureExtractor.from_pretrained(whisper_dir)
    prompt = decoder_prompt(WhisperTokens.from_generation_config(generation_config(whisper_dir)))
    return {name: (prompt, whisper_input(fe, clip(freq, seed=seed)))
            for name, (freq, seed) in CLIPS.items()}


def run(engine, requests: dict) -> dict[str, list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    for name, (prompt, audio) in requests.items():
        engine.add_request(name, prompt, params, (audio,))
    got: dict[str, list[int]] = {name: [] for name in requests}
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.request_id] += out.new_token_ids
    return got


def test_whisper_tokens_are_the_same_colocated_and_apart(whisper_dir, requests):
    from mstar.engine.llm_engine import LLMEngine
    from mstar.ipc.security import instance_security
    from mstar.worker.encoder_node import EncoderNodeProcess

    settings = dict(model=str(whisper_dir), device="cpu", dtype="float32")
    here = LLMEngine(WorkerSettings(**settings))
    colocated = run(here, requests)
    here.shutdown()
    prompt, audio = requests["a"]
    assert colocated["a"] == hf_greedy(whisper_dir, audio.tensors["input_features"], prompt,
                                       MAX_NEW, False)
    assert colocated["a"] != colocated["b"]

    apart = WorkerSettings(**settings, encoder_placement=PLACED)
    with pytest.raises(ValueError, match="MSTAR_ENCODER_PLACEMENT places audio_encoder"):
        LLMEngine(apart)  # only a worker starts the node's process
    node = EncoderNodeProcess(apart, "audio_encoder", instance_security(apart).max_message_bytes)
    try:
        engine = LLMEngine(apart, placed_nodes={"audio_encoder": node})
        assert run(engine, requests) == colocated
        assert node.calls == 2  # each distinct clip once, over the transport
        engine.shutdown()
    finally:
        node.close()
    assert node.proc.poll() is not None and not node.dir.exists()
