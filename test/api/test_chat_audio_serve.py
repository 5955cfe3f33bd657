"""Chat with audio out against `mstar serve` on a tiny random Qwen3-Omni saved in code (float32),
through the official openai client, streamed and not: the WAV parses with Python's ``wave`` at
code2wav's rate, its samples are ``OmniSpeaker.speak``'s for the same prompt and voice within one
16-bit step (so its length is the codes' frames times code2wav's samples a frame), the transcript
is the reply's text, and the streamed pcm16 is the same samples.

Skipped until the chained walk lands (helper "chain": the registry's Qwen3-Omni graph then emits
audio, thinker -> talker -> code2wav); the stub-engine tests (test_chat_audio.py) cover the API's
shapes meanwhile."""

from __future__ import annotations

import base64
import io
import wave

import numpy as np
import pytest

from mstar.models.loading.registry import output_modalities

OMNI = "Qwen3OmniMoeForConditionalGeneration"
pytestmark = pytest.mark.skipif(
    "audio" not in output_modalities([OMNI]),
    reason="Qwen3-Omni's graph emits no audio yet: the chained thinker -> talker -> code2wav "
    "walk (helper chain, issue 35 item 1) is not on this branch")

HI = [{"role": "user", "content": "Hello there, how are you?"}]
MAX_TOKENS = 6
STEP = 1 / 32767  # one 16-bit step of full scale
VOICE = "ethan"  # omni_helpers' talker_config.speaker_id


@pytest.fixture(scope="module")
def omni_dir(tmp_path_factory, tiny_tokenizer):
    from omni_helpers import save_tiny_omni

    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer)


@pytest.fixture(scope="module")
def served(omni_dir, tmp_path_factory):
    from serve_helpers import running_server

    yield from running_server(omni_dir, tmp_path_factory.mktemp("omni-serve") / "s.log",
                              {"MSTAR_DTYPE": "float32"})


@pytest.fixture(scope="module")
def client(served):
    import openai

    return openai.OpenAI(api_key="x", base_url=served.url + "/v1", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def reference(served, omni_dir, tiny_tokenizer):
    """``OmniSpeaker.speak``'s reply to HI, from the prompt ids the server renders for it
    (``/tokenize`` with messages): (its text, its samples, frames, samples a frame, rate). The
    saved model's tokenizer must render Qwen3-Omni's turn ids (``omni_helpers._specials``), which
    the chain's served tiny Qwen3-Omni provides."""
    import httpx

    from mstar.models.speech.omni_speaker import OmniSpeaker

    resp = httpx.post(served.url + "/tokenize", json={"messages": HI}, timeout=60)
    assert resp.status_code == 200, resp.text
    ids = resp.json()["tokens"]
    speaker = OmniSpeaker(omni_dir)
    said, speech = speaker.speak(ids, MAX_TOKENS, max_frames=4096, speaker=VOICE)
    text = tiny_tokenizer.decode(said[len(ids):], skip_special_tokens=True)
    return text, speech.audio, len(speech.codes), speaker.codec.samples_per_frame, speech.rate


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
    assert len(samples) == len(audio) == frames * per_frame
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
