"""Qwen3-Omni speaking against `mstar serve` on a tiny random Qwen3-Omni saved in code (float32,
its tokenizer rendering the config's turn ids: ``omni_helpers.omni_tokenizer``), through the
official openai client.

Chat with audio out, streamed and not: the WAV parses with Python's ``wave`` at code2wav's rate,
its samples are ``OmniSpeaker.speak``'s for the same prompt, voice and code2wav windows within one
16-bit step (so its length is the codes' frames times code2wav's samples a frame, less the samples
each window's upsampling cuts at its end, as transformers' ``chunked_decode`` cuts them), the
transcript is the reply's text, and the streamed pcm16 is the same samples. The served windows
(4 frames after 8) are shorter than the reply: the first audio arrives before the last text.

/v1/audio/speech: ``input`` as a user turn through the chat template (``speak_reply``), spoken in
the talker's voice: ``audio.speech.create`` and ``with_streaming_response`` give the same WAV,
``OmniSpeaker.speak``'s samples for that turn; an unknown voice is a 400 naming ``voice``.

Bounds small enough to reach (max_model_len 64, 2 s of speech: 25 frames), so the speech route's
reply (greedy, to what max_model_len leaves) stays short. Served with the talker colocated and in
a process of its own (MSTAR_ENCODER_PLACEMENT ``talker=process``)."""

from __future__ import annotations

import base64
import io
import math
import wave

import numpy as np
import pytest

HI = [{"role": "user", "content": "Hello there, how are you?"}]
SAY = "Good morning to you all."  # /v1/audio/speech's input
MAX_TOKENS = 6
MAX_MODEL_LEN = 64
MAX_FRAMES = 25  # MSTAR_MAX_SPEECH_SECONDS 2 at code2wav's 12.5 frames a second
# code2wav's served windows (MSTAR_SPEECH_CHUNK_FRAMES, MSTAR_SPEECH_LEFT_CONTEXT): shorter than
# the reply, so audio goes out while the talker still speaks
CHUNK, LEFT = 4, 8
STEP = 1 / 32767  # one 16-bit step of full scale
VOICE = "ethan"  # omni_helpers' talker_config.speaker_id


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory, tiny_tokenizer):
    from omni_helpers import save_tiny_omni

    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer)


@pytest.fixture(scope="module", params=["", "talker=process"], ids=["colocated", "talker-apart"])
def served(omni_dir, tmp_path_factory, request):
    """The talker in the worker's process, or in one of its own (MSTAR_ENCODER_PLACEMENT): the
    same samples either way."""
    from serve_helpers import running_server

    server = running_server(omni_dir, tmp_path_factory.mktemp("omni-serve") / "s.log",
                            {"MSTAR_DTYPE": "float32", "MSTAR_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
                             "MSTAR_MAX_SPEECH_SECONDS": "2",
                             "MSTAR_SPEECH_CHUNK_FRAMES": str(CHUNK),
                             "MSTAR_SPEECH_LEFT_CONTEXT": str(LEFT),
                             "MSTAR_SERVED_MODEL_NAMES": "x",
                             "MSTAR_ENCODER_PLACEMENT": request.param})
    srv = next(server)
    try:
        assert ("talker_node_ready" in srv.log()) == bool(request.param)
        yield srv
    finally:
        server.close()  # stops it


@pytest.fixture(scope="module")
def client(served):
    import openai

    return openai.OpenAI(api_key="x", base_url=served.url + "/v1", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def speaker(omni_dir):
    """The offline chain, its code2wav in the server's windows (whose samples are transformers'
    ``chunked_decode`` for the same windows: test/models/test_omni_code2wav.py)."""
    from mstar.graph.chunks import frame_windows
    from mstar.models.speech.omni_speaker import OmniSpeaker

    return OmniSpeaker(omni_dir, frame_windows(CHUNK, LEFT))


def _offline(served, omni_dir, speaker, messages, max_tokens):
    """``OmniSpeaker.speak``'s reply to ``messages``, from the prompt ids the server renders for
    them (``/tokenize`` with messages): (its text, its samples, frames, samples a frame, rate).
    ``max_tokens``: None: what max_model_len leaves."""
    import httpx
    from transformers import AutoTokenizer

    resp = httpx.post(served.url + "/tokenize", json={"messages": messages}, timeout=60)
    assert resp.status_code == 200, resp.text
    ids = resp.json()["tokens"]
    assert ids[-2:-1] == [speaker.model.config.assistant_token_id]  # the talker's turn
    said, speech = speaker.speak(ids, max_tokens or MAX_MODEL_LEN - len(ids),
                                 max_frames=MAX_FRAMES, speaker=VOICE)
    text = AutoTokenizer.from_pretrained(omni_dir).decode(said[len(ids):],
                                                          skip_special_tokens=True)
    return (text, speech.audio, len(speech.codes), speaker.codec.samples_per_frame,
            speech.sample_rate)


@pytest.fixture(scope="module")
def reference(served, omni_dir, speaker):
    """The offline reply to HI (``_offline``)."""
    return _offline(served, omni_dir, speaker, HI, MAX_TOKENS)


@pytest.fixture(scope="module")
def said(served, omni_dir, speaker):
    """The offline reply to SAY as a user turn, to what max_model_len leaves."""
    return _offline(served, omni_dir, speaker, [{"role": "user", "content": SAY}], None)


def _length(frames: int, per_frame: int) -> int:
    """The samples of ``frames`` frames in the served windows: each window (of CHUNK new frames,
    the last maybe fewer) cuts CODEC_CUT at its end, as transformers' ``chunked_decode`` does."""
    from omni_helpers import CODEC_CUT

    return frames * per_frame - math.ceil(frames / CHUNK) * CODEC_CUT


def _samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767


def test_a_spoken_reply_is_the_offline_speech(client, reference):
    text, audio, frames, per_frame, rate = reference
    out = client.chat.completions.create(model="x", messages=HI, max_tokens=MAX_TOKENS,
                                         temperature=0, modalities=["text", "audio"],
                                         audio={"voice": VOICE, "format": "wav"})
    spoken = out.choices[0].message.audio
    assert spoken is not None and out.choices[0].message.content is None
    assert spoken.transcript == text
    with wave.open(io.BytesIO(base64.b64decode(spoken.data))) as w:
        assert w.getframerate() == rate
        samples = _samples(w.readframes(w.getnframes()))
    assert len(samples) == len(audio) == _length(frames, per_frame) > 0
    assert np.abs(samples - np.clip(audio, -1, 1)).max() <= STEP


def test_a_streamed_spoken_reply_is_the_same_samples(client, reference):
    text, audio, _, _, _ = reference
    stream = client.chat.completions.create(model="x", messages=HI, max_tokens=MAX_TOKENS,
                                            temperature=0, modalities=["text", "audio"],
                                            stream=True,
                                            audio={"voice": VOICE, "format": "pcm16"})
    pieces = [c.choices[0].delta.audio for c in stream if c.choices and c.choices[0].delta.audio]
    pieces = [p if isinstance(p, dict) else p.model_dump() for p in pieces]
    assert "".join(p.get("transcript") or "" for p in pieces) == text
    pcm = b"".join(base64.b64decode(p["data"]) for p in pieces if p.get("data"))
    assert np.abs(_samples(pcm) - np.clip(audio, -1, 1)).max() <= STEP
    assert len(_samples(pcm)) == len(audio)


def _wav_samples(body: bytes, rate: int) -> np.ndarray:
    with wave.open(io.BytesIO(body)) as w:
        assert w.getframerate() == rate and w.getnchannels() == 1 and w.getsampwidth() == 2
        return _samples(w.readframes(w.getnframes()))


def test_speech_says_the_reply_to_the_input_as_a_user_turn(client, said):
    _, audio, frames, per_frame, rate = said
    samples = _wav_samples(client.audio.speech.create(model="x", input=SAY, voice=VOICE,
                                                      response_format="wav").content, rate)
    assert len(samples) == len(audio) == _length(frames, per_frame) > 0
    assert np.abs(samples - np.clip(audio, -1, 1)).max() <= STEP
    with client.audio.speech.with_streaming_response.create(
            model="x", input=SAY, voice=VOICE, response_format="wav") as resp:
        streamed = b"".join(resp.iter_bytes())
    assert np.array_equal(_wav_samples(streamed, rate), samples)


def test_speech_with_an_unknown_voice_is_a_400_naming_voice(served):
    import httpx

    resp = httpx.post(served.url + "/v1/audio/speech", json={"input": SAY, "voice": "0"},
                      timeout=60)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "voice"
    assert "ethan" in resp.json()["error"]["message"]


def test_the_first_audio_comes_before_the_last_text(client):
    """A reply longer than code2wav's window: its first pcm arrives while the transcript still
    grows (the thinker's last tokens come after it), not at the talker's end."""
    stream = client.chat.completions.create(
        model="x", messages=HI, max_tokens=MAX_MODEL_LEN // 2, temperature=0,
        extra_body={"ignore_eos": True}, modalities=["text", "audio"], stream=True,
        audio={"voice": VOICE, "format": "pcm16"})
    kinds = []
    for chunk in stream:
        audio = chunk.choices[0].delta.audio if chunk.choices else None
        audio = audio if isinstance(audio, dict) or audio is None else audio.model_dump()
        kinds += [k for k in ("data", "transcript") if audio and audio.get(k)]
    assert kinds.count("data") > 1  # several windows
    assert kinds.index("data") < len(kinds) - 1 - kinds[::-1].index("transcript")
