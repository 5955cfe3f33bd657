"""Chat completions with audio out (``modalities: ["text", "audio"]``, ``audio: {voice,
format}``) on the stub engine, whose speaking model sends ``stub_audio`` beside each token of a
request with ``speaker`` set: the refusals (each naming its field), the voice reaching the
worker's params, OpenAI's non-streamed and streamed shapes, the official client parsing both, and
the WAV's samples being the chunks' samples."""

from __future__ import annotations

import base64
import io
import json
import wave

import numpy as np
import openai
import pytest
from api_stub import SPEAKS, STUB_RATE, STUB_SAMPLES, STUB_VOICES, StubEngine, app_on, stub_audio
from starlette.testclient import TestClient

from mstar.api_server.media.model import model_voices
from mstar.api_server.media.sound_formats import pcm16

HI = [{"role": "user", "content": "hi"}]
SPOKEN = {"modalities": ["text", "audio"], "audio": {"voice": "ethan", "format": "wav"}}
TOKENS = 3  # the stub's tokens for max_tokens 3


@pytest.fixture(scope="module")
def speaking(tiny_tokenizer):
    engine = StubEngine()
    app = app_on(engine, tiny_tokenizer, outputs=SPEAKS, voices=STUB_VOICES)
    return TestClient(app), engine


@pytest.fixture(scope="module")
def texting(tiny_tokenizer):
    return TestClient(app_on(StubEngine(), tiny_tokenizer))


def chat(client: TestClient, **fields):
    return client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": TOKENS,
                                                     **fields})


def expected_pcm(tokens: int = TOKENS) -> bytes:
    return b"".join(pcm16(stub_audio(k).samples) for k in range(tokens))


def test_audio_out_from_a_model_that_does_not_speak_names_modalities(texting):
    resp = chat(texting, **SPOKEN)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "modalities"
    assert chat(texting, modalities=["text"]).status_code == 200


@pytest.mark.parametrize(("fields", "param"), [
    ({"modalities": ["text", "audio"]}, "audio"),  # no audio object
    ({"audio": {"voice": "ethan", "format": "wav"}}, "audio"),  # audio not in modalities
    ({"modalities": ["audio"], "audio": SPOKEN["audio"]}, "modalities"),  # no transcript
    ({**SPOKEN, "audio": {"voice": "alloy", "format": "wav"}}, "audio.voice"),
    ({**SPOKEN, "audio": {"voice": "ethan", "format": "aac"}}, "audio.format"),
    ({**SPOKEN, "audio": {"voice": "ethan", "format": "ogg"}}, "audio.format"),
    ({**SPOKEN, "n": 2}, "n"),
    ({**SPOKEN, "stream": True}, "stream"),  # a streamed reply is pcm16 only
    ({**SPOKEN, "audio": {"voice": "ethan"}}, "audio.format"),
])
def test_each_refusal_names_its_field(speaking, fields, param):
    client, engine = speaking
    before = len(engine.submitted)
    resp = chat(client, **fields)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param
    assert len(engine.submitted) == before  # refused before any work


def test_the_voice_becomes_the_speaker(speaking):
    client, engine = speaking
    assert chat(client, **{**SPOKEN, "audio": {"voice": "Chelsie", "format": "wav"}}
                ).status_code == 200
    assert engine.submitted[-1][2].speaker == "chelsie"  # the model's own name for it
    assert chat(client).status_code == 200
    assert engine.submitted[-1][2].speaker is None  # text only: no speaker


def test_a_spoken_reply_is_message_audio_with_the_whole_wav(speaking):
    client, _ = speaking
    resp = chat(client, **SPOKEN)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    message = body["choices"][0]["message"]
    assert message["content"] is None
    audio = message["audio"]
    assert audio["id"].startswith("audio_") and audio["transcript"] == "a" * TOKENS
    assert audio["expires_at"] == body["created"]
    with wave.open(io.BytesIO(base64.b64decode(audio["data"]))) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, STUB_RATE)
        assert w.getnframes() == TOKENS * STUB_SAMPLES
        assert w.readframes(w.getnframes()) == expected_pcm()


@pytest.mark.parametrize("chat_format", ["pcm16", "flac", "mp3", "opus"])
def test_every_format_is_a_whole_file(speaking, chat_format):
    client, _ = speaking
    resp = chat(client, **{**SPOKEN, "audio": {"voice": "ethan", "format": chat_format}})
    assert resp.status_code == 200, resp.text
    data = base64.b64decode(resp.json()["choices"][0]["message"]["audio"]["data"])
    if chat_format == "pcm16":
        assert data == expected_pcm()
    else:
        magic = {"flac": b"fLaC", "opus": b"OggS"}.get(chat_format)
        assert data and (magic is None or data.startswith(magic))


def stream_deltas(client: TestClient, **fields) -> list[dict]:
    resp = chat(client, stream=True, **fields)
    assert resp.status_code == 200, resp.text
    events = [block.removeprefix("data: ") for block in resp.text.strip().split("\n\n")]
    assert events[-1] == "[DONE]"
    return [json.loads(e)["choices"][0] for e in events[:-1] if json.loads(e)["choices"]]


def test_a_streamed_reply_sends_transcript_and_pcm16_as_delta_audio(speaking):
    client, _ = speaking
    choices = stream_deltas(client, modalities=["text", "audio"],
                            audio={"voice": "ethan", "format": "pcm16"})
    audios = [c["delta"]["audio"] for c in choices if "audio" in c["delta"]]
    assert not any("content" in c["delta"] and c["delta"]["content"] for c in choices)
    assert len({a["id"] for a in audios}) == 1 and audios[0]["id"].startswith("audio_")
    assert "expires_at" in audios[0]
    assert set(audios[-1]) == {"id", "expires_at"}  # the last: only the expiry
    assert "".join(a.get("transcript", "") for a in audios) == "a" * TOKENS
    data = b"".join(base64.b64decode(a["data"]) for a in audios if "data" in a)
    assert data == expected_pcm()
    assert [c["finish_reason"] for c in choices][-1] == "length"
    assert all(c["finish_reason"] is None for c in choices[:-1])


def test_a_streamed_reply_coalesced_keeps_every_sample(tiny_tokenizer):
    client = TestClient(app_on(StubEngine(), tiny_tokenizer, outputs=SPEAKS, voices=STUB_VOICES,
                               stream_interval=2))
    choices = stream_deltas(client, modalities=["text", "audio"],
                            audio={"voice": "ethan", "format": "pcm16"})
    data = b"".join(base64.b64decode(c["delta"]["audio"]["data"]) for c in choices
                    if "data" in c["delta"].get("audio", {}))
    assert data == expected_pcm()


def test_the_openai_client_parses_both_shapes(speaking):
    client, _ = speaking
    api = openai.OpenAI(api_key="x", base_url="http://testserver/v1", http_client=client,
                        max_retries=0)
    out = api.chat.completions.create(model="stub-model", messages=HI, max_tokens=TOKENS,
                                      modalities=["text", "audio"],
                                      audio={"voice": "ethan", "format": "wav"})
    audio = out.choices[0].message.audio
    assert audio is not None and audio.transcript == "a" * TOKENS
    with wave.open(io.BytesIO(base64.b64decode(audio.data))) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(samples) == TOKENS * STUB_SAMPLES
    stream = api.chat.completions.create(model="stub-model", messages=HI, max_tokens=TOKENS,
                                         modalities=["text", "audio"], stream=True,
                                         audio={"voice": "ethan", "format": "pcm16"})
    pieces = [chunk.choices[0].delta.audio for chunk in stream
              if chunk.choices and chunk.choices[0].delta.audio]
    # the SDK keeps the delta's audio as a dict-like model with extra fields
    datas = [p["data"] if isinstance(p, dict) else getattr(p, "data", None) for p in pieces]
    pcm = b"".join(base64.b64decode(d) for d in datas if d)
    assert pcm == expected_pcm()
    with pytest.raises(openai.BadRequestError) as exc:
        api.chat.completions.create(model="stub-model", messages=HI, max_tokens=TOKENS,
                                    modalities=["text", "audio"],
                                    audio={"voice": "nobody", "format": "wav"})
    assert exc.value.param == "audio.voice"


def test_the_fields_are_in_the_published_schema(speaking):
    client, _ = speaking
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    request = schemas["ChatCompletionRequest"]["properties"]
    assert {"modalities", "audio"} <= set(request)
    assert set(schemas["ChatAudioParams"]["properties"]) == {"voice", "format"}
    assert set(schemas["ChatAudioOut"]["properties"]) == {"id", "data", "expires_at",
                                                          "transcript"}


def test_the_voices_are_the_talker_speaker_ids():
    assert model_voices({"talker_config": {"speaker_id": {"ethan": 2302, "chelsie": 2301}}}) == (
        "ethan", "chelsie")
    assert model_voices({"talker_config": {}}) == () and model_voices({}) == ()


def test_the_published_response_models_describe_both_shapes(speaking):
    from mstar.api_server.openai.response_models import ChatCompletionChunk, ChatCompletionResponse

    client, _ = speaking
    body = chat(client, **SPOKEN).json()
    assert ChatCompletionResponse.model_validate(body).choices[0].message.audio is not None
    resp = chat(client, stream=True, modalities=["text", "audio"],
                audio={"voice": "ethan", "format": "pcm16"})
    events = [block.removeprefix("data: ") for block in resp.text.strip().split("\n\n")][:-1]
    chunks = [ChatCompletionChunk.model_validate(json.loads(e)) for e in events]
    assert any(c.choices and c.choices[0].delta.audio for c in chunks)
