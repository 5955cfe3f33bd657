"""POST /v1/audio/transcriptions and /translations on a stub Whisper (known token ids): the
decoder prompts sent, the 30 s windows, every response format and the stream's events; and each
bad upload or field a 4xx naming it, with /health green after."""

from __future__ import annotations

import json

import pytest
from audio_files import cut, encoded, lying_wav
from starlette.testclient import TestClient
from whisper_stub import (
    EN,
    FR,
    LOGPROB,
    NO_TIMESTAMPS,
    PREVIOUS,
    START,
    TRANSLATE,
    speech_script,
    ts,
    whisper_app,
)

from mstar.api_server.audio.formats import clock

URL = "/v1/audio/transcriptions"


@pytest.fixture(scope="module")
def words(tiny_tokenizer):
    """Text ids of two phrases, and their text as the tokenizer decodes it."""
    a = tiny_tokenizer.encode(" the cat", add_special_tokens=False)
    b = tiny_tokenizer.encode(" sat down", add_special_tokens=False)
    return a, b, tiny_tokenizer.decode(a), tiny_tokenizer.decode(b)


def post(client, data: bytes, url: str = URL, name: str = "a.wav", **fields):
    return client.post(url, files={"file": (name, data, "audio/wav")}, data=fields)


@pytest.fixture(scope="module")
def served(tiny_tokenizer, words):
    app, engine, clips = whisper_app(tiny_tokenizer, speech_script(words))
    return TestClient(app), engine, clips


def test_json_is_untimed_and_sends_whisper_prompt(served, words):
    client, engine, clips = served
    resp = post(client, encoded("WAV", 2.0, 44_100, channels=2))
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"text": (words[2] + words[3]).strip(),
                           "usage": {"type": "duration", "seconds": 2}}
    assert list(engine.submitted[-1][1].token_ids) == [START, NO_TIMESTAMPS]
    assert len(clips.seen[-1]) == 32_000  # mono, 16 kHz


def test_text_srt_vtt_and_verbose_json(served, words):
    client, _, _ = served
    text = (words[2] + words[3]).strip()
    assert post(client, encoded("WAV", 2.0), response_format="text").text == text
    srt = post(client, encoded("WAV", 2.0), response_format="srt").text
    assert srt == (f"1\n00:00:00,000 --> 00:00:01,200\n{words[2].strip()}\n\n"
                   f"2\n00:00:01,200 --> 00:00:02,000\n{words[3].strip()}\n\n")
    vtt = post(client, encoded("WAV", 2.0), response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.200\n")
    body = post(client, encoded("FLAC", 2.0), response_format="verbose_json",
                **{"timestamp_granularities[]": "segment"}).json()
    assert (body["task"], body["language"], body["duration"], body["text"]) == (
        "transcribe", "english", 2.0, text)
    assert [(s["start"], s["end"], s["text"]) for s in body["segments"]] == [
        (0.0, 1.2, words[2]), (1.2, 2.0, words[3])]
    assert body["segments"][0]["avg_logprob"] == pytest.approx(LOGPROB)


@pytest.mark.parametrize("fmt, subtype, name", [
    ("MP3", None, "a.mp3"), ("OGG", "OPUS", "a.opus"), ("FLAC", None, "a.flac")])
def test_mp3_opus_and_flac_uploads_transcribe(served, words, fmt, subtype, name):
    """The compressed containers decode (soundfile) to the clip a WAV gives: 2 s at 16 kHz, to
    the sample (libsndfile trims the lossy codecs' delay and padding)."""
    client, _, clips = served
    resp = post(client, encoded(fmt, 2.0, 48_000 if subtype else 16_000, subtype=subtype), name=name)
    assert resp.status_code == 200, resp.text
    assert resp.json()["text"] == (words[2] + words[3]).strip()
    assert len(clips.seen[-1]) == 32_000


def test_clock_formats():
    assert clock(3725.0456, ",") == "01:02:05,046" and clock(0.0, ".") == "00:00:00.000"


def test_long_audio_runs_sequential_windows(tiny_tokenizer, words):
    a, b, ta, tb = words

    def script(prompt, k):
        # window 0 is cut mid-speech at 12 s: window 1 starts there, ends on a single
        # timestamp (done with its 30 s); window 2 (42 .. 45 s) is silence
        return [[ts(0.0), *a, ts(12.0), ts(12.0), *b], [ts(0.0), *b, ts(8.0)], []][k % 3]
    app, engine, clips = whisper_app(tiny_tokenizer, script)
    body = post(TestClient(app), encoded("WAV", 45.0), response_format="verbose_json").json()
    assert [len(c) for c in clips.seen] == [30 * 16_000, 30 * 16_000, 3 * 16_000]
    assert [(s["start"], s["end"], s["seek"]) for s in body["segments"]] == [
        (0.0, 12.0, 0), (12.0, 20.0, 1200)]
    assert body["text"] == (ta + tb).strip()
    assert body["duration"] == 45.0
    resp = post(TestClient(app), encoded("WAV", 45.0), stream="true")  # a delta per segment
    events = [json.loads(line[6:]) for line in resp.text.split("\n\n") if line]
    assert [e.get("delta") for e in events[:-1]] == [ta.lstrip(), tb]


def test_prompt_language_and_translation(tiny_tokenizer, words):
    app, engine, _ = whisper_app(tiny_tokenizer, speech_script(words), multilingual=True)
    client = TestClient(app)
    resp = post(client, encoded(), url="/v1/audio/translations", language="fr", prompt="the")
    assert resp.status_code == 200, resp.text
    ids = list(engine.submitted[-1][1].token_ids)
    assert ids[0] == PREVIOUS and ids[-4:] == [START, FR, TRANSLATE, NO_TIMESTAMPS]
    resp = post(client, encoded())  # multilingual, no language: mstar does not detect it
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, "language")
    assert post(client, encoded(), language="en").status_code == 200
    assert EN in engine.submitted[-1][1].token_ids


def test_stream_sends_delta_then_done_events(served, words):
    client, _, _ = served
    resp = post(client, encoded("WAV", 2.0), stream="true")
    events = [json.loads(line[6:]) for line in resp.text.split("\n\n") if line]
    kinds = [e["type"] for e in events]
    assert kinds == ["transcript.text.delta"] * (len(events) - 1) + ["transcript.text.done"]
    assert len(events) > 3  # untimed: token by token, as the ids arrive
    assert "".join(e["delta"] for e in events[:-1]) == events[-1]["text"] == (
        words[2] + words[3]).strip()
    assert events[-1]["usage"] == {"type": "duration", "seconds": 2}


@pytest.mark.parametrize("fields,param", [
    ({"timestamp_granularities[]": "word", "response_format": "verbose_json"},
     "timestamp_granularities[]"),
    ({"timestamp_granularities[]": "segment"}, "timestamp_granularities[]"),
    ({"response_format": "diarized_json"}, "response_format"),
    ({"temperature": "1.5"}, "temperature"),
    ({"stream": "maybe"}, "stream"),
    ({"stream": "true", "response_format": "srt"}, "stream"),
    ({"include[]": "logprobs"}, "include[]"),
    ({"chunking_strategy": "auto"}, "chunking_strategy"),
    ({"language": "fr"}, "language"),  # an English-only model
])
def test_refused_fields_are_named(served, fields, param):
    resp = post(served[0], encoded(), **fields)
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, param), resp.text


def test_an_english_only_model_does_not_translate(served):
    resp = post(served[0], encoded(), url="/v1/audio/translations")
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, "model")


@pytest.mark.parametrize("data,status", [
    (b"", 400), (b"RIFF" + bytes(100), 400), (lying_wav(), 413), (cut(encoded("MP3", 2.0)), 400),
    (b"\xff\xfb\x90\x00" + bytes(range(256)) * 16, 400), (encoded("AIFF", subtype="PCM_16"), 400),
])
def test_bad_uploads_are_4xx_naming_file_and_health_stays_green(served, data, status):
    client = served[0]
    resp = post(client, data)
    assert (resp.status_code, resp.json()["error"]["param"]) == (status, "file"), resp.text
    assert client.get("/health").json() == {"status": "ok"}


def test_a_missing_file_and_an_unknown_model(served):
    resp = served[0].post(URL, data={"model": "stub-model"}, files={"x": ("x", b"1")})
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, "file"), resp.text
    resp = post(served[0], encoded(), model="nope")
    assert resp.status_code == 404


def test_a_body_past_max_body_mb_is_413(tiny_tokenizer, words):
    app, _, _ = whisper_app(tiny_tokenizer, speech_script(words), max_body_mb=1.0)
    client = TestClient(app)
    assert post(client, bytes(2 << 20)).status_code == 413
    assert client.get("/health").status_code == 200


def test_a_text_model_does_not_transcribe(tiny_tokenizer):
    from api_stub import stub_app

    resp = post(TestClient(stub_app(tiny_tokenizer)[0]), encoded())
    assert (resp.status_code, resp.json()["error"]["param"]) == (400, "model")


def test_the_openai_client_transcribes_and_translates(tiny_tokenizer, words):
    import openai

    app, _, _ = whisper_app(tiny_tokenizer, speech_script(words), multilingual=True)
    client = openai.OpenAI(api_key="x", base_url="http://testserver/v1",
                           http_client=TestClient(app))
    text = (words[2] + words[3]).strip()
    audio = ("a.flac", encoded("FLAC", 2.0))
    got = client.audio.transcriptions.create(file=audio, model="stub-model", language="en")
    assert got.text == text
    verbose = client.audio.transcriptions.create(
        file=audio, model="stub-model", language="en", response_format="verbose_json",
        timestamp_granularities=["segment"])
    assert [s.end for s in verbose.segments] == [1.2, 2.0]
    assert client.audio.transcriptions.create(file=audio, model="stub-model", language="en",
                                              response_format="srt").startswith("1\n00:00:00,000")
    events = list(client.audio.transcriptions.create(file=audio, model="stub-model",
                                                     language="en", stream=True))
    assert events[-1].type == "transcript.text.done" and events[-1].text == text
    got = client.audio.translations.create(file=audio, model="stub-model", extra_body={
        "language": "fr"})
    assert got.text == text
