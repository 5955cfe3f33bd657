"""input_audio content parts in chat completions and the Responses API: refused by name on a
text-only model and on the Anthropic route; on an audio-in model each bad part (damaged data, a
wrong ``format``, too many parts, too long) a 4xx naming the part before any feature extraction,
with /health green after."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import pytest
from api_stub import StubEngine, app_on, stub_app
from audio_files import cut, encoded, lying_wav
from starlette.testclient import TestClient

PART = "messages.0.content.1"


def audio_part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio",
            "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def chat(client, *parts: dict):
    content = [{"type": "text", "text": "what is said?"}, *parts]
    return client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": content}], "max_tokens": 2})


@pytest.fixture(scope="module")
def text_model(tiny_tokenizer):
    return TestClient(stub_app(tiny_tokenizer)[0])


@pytest.fixture(scope="module")
def audio_model(tiny_tokenizer):
    """An audio-in model's server; its processor is never reached by these requests (every one
    is refused while its audio is checked)."""
    processor = SimpleNamespace(feature_extractor=SimpleNamespace(sampling_rate=16_000),
                                tokenizer=tiny_tokenizer)
    app = app_on(StubEngine(), tiny_tokenizer, modalities=("text", "audio"), processor=processor,
                 max_audio_seconds=5.0, max_audio_seconds_per_request=6.0,
                 max_audio_parts_per_request=2)
    return TestClient(app)


def test_a_text_model_refuses_audio_naming_the_part(text_model):
    resp = chat(text_model, audio_part(encoded()))
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, PART), resp.text
    assert "input_audio" in resp.json()["error"]["message"]


def test_the_responses_api_refuses_audio_on_a_text_model(text_model):
    resp = text_model.post("/v1/responses", json={"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "hi"}, audio_part(encoded())]}]})
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, "input.0"), resp.text
    assert "input_audio" in resp.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["audio", "input_audio"])
def test_the_anthropic_route_refuses_audio_by_name(text_model, kind):
    resp = text_model.post("/v1/messages", json={"model": "stub-model", "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": [
                                                     {"type": kind, "source": {}}]}]})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "messages.0.content.0.type" and "audio" in error["message"]


@pytest.mark.parametrize("part,status,param", [
    (audio_part(b""), 400, f"{PART}.input_audio.data"),
    (audio_part(cut(encoded("MP3", 2.0)), "mp3"), 400, f"{PART}.input_audio"),
    (audio_part(b"\xff\xfb\x90\x00" + bytes(range(256)) * 16, "mp3"), 400,
     f"{PART}.input_audio"),
    (audio_part(lying_wav()), 413, f"{PART}.input_audio"),
    (audio_part(encoded("WAV", 6.0)), 413, f"{PART}.input_audio"),
    (audio_part(encoded("WAV"), "mp3"), 400, f"{PART}.input_audio.format"),
    (audio_part(encoded("WAV"), "aiff"), 400, f"{PART}.input_audio.format"),
    ({"type": "input_audio", "input_audio": {"data": "@@", "format": "wav"}}, 400,
     f"{PART}.input_audio.data"),
    ({"type": "input_audio"}, 400, f"{PART}.input_audio"),
])
def test_bad_audio_parts_are_4xx_naming_the_part(audio_model, part, status, param):
    resp = chat(audio_model, part)
    assert (resp.status_code, resp.json()["error"]["param"]) == (status, param), resp.text
    assert audio_model.get("/health").json() == {"status": "ok"}


def test_parts_and_seconds_per_request_are_bounded(audio_model):
    three = [audio_part(encoded("WAV", 1.0))] * 3
    resp = chat(audio_model, *three)
    assert (resp.status_code, resp.json()["error"]["param"]) == (
        400, "messages.0.content.3.input_audio")
    resp = chat(audio_model, audio_part(encoded("WAV", 4.0)), audio_part(encoded("WAV", 4.0)))
    assert (resp.status_code, resp.json()["error"]["param"]) == (
        413, "messages.0.content.2.input_audio")
