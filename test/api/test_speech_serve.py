"""POST /v1/audio/speech served (`mstar serve` on a tiny random CSM saved in code, float32): the
worker's codec node decodes the engine's frames and the route frames the samples. The WAV parses
(``soundfile``, Python's ``wave``) at the codec's rate, and its samples are ``LLM.speak``'s for the
same input and speaker within one 16-bit step (the same frames and windows; the route's only
change is the 16-bit rounding, ``sound_formats``); pcm is the same samples raw, streamed or not;
two concurrent requests each get their own; each refused field is a 400 naming it; the speech
bounds (served with small ones) refuse by field and knob, and the seconds bound is an unset
``max_frames``; the model's text routes refuse (it makes no text); a text model refuses speech,
naming ``model``."""

from __future__ import annotations

import base64
import io
import json
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from api_stub import stub_app
from field_checks import check_refused
from speech_server import BOUND_FRAMES, INPUT_CHARS
from starlette.testclient import TestClient

from mstar.api_server.validation.field_table import TABLE, rst_table

FRAMES = 14
ROWS = [row for row in TABLE if "speech" in row.endpoints]
BASE = {"input": "Hello there.", "max_frames": 3}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "openai_api.rst"
ONE = {"input": "Hello there.", "voice": "0", "max_frames": FRAMES}
TWO = {"input": "How are you today?", "voice": "1", "max_frames": FRAMES - 5}
STEP = 1 / 32767  # one 16-bit step of full scale


@pytest.fixture
def served(speech_server):
    """The session's served tiny CSM (test/speech_server.py: its bounds are BOUND_FRAMES frames
    and INPUT_CHARS characters), shared with test_speech_formats.py."""
    return speech_server


@pytest.fixture(scope="module")
def spoken(speech_csm):
    """LLM.speak's speech of ONE and TWO (the offline path: engine frames, the codec node)."""
    from mstar import LLM

    llm = LLM(model=str(speech_csm), device="cpu", dtype="float32", kv_block_size=4,
              num_kv_blocks=64)
    return {key: llm.speak(body["input"], speaker=int(body["voice"]),
                           max_frames=body["max_frames"])[0]
            for key, body in (("one", ONE), ("two", TWO))}


def _speech(served, body: dict) -> httpx.Response:
    return httpx.post(served.url + "/v1/audio/speech", json=body, timeout=120)


def _same_samples(pcm: np.ndarray, speech) -> None:
    """16-bit samples against LLM.speak's float32 ones: same length, within a step."""
    expected = np.clip(speech.audio, -1.0, 1.0)
    assert len(pcm) == len(expected) > 0
    assert np.abs(pcm / 32767 - expected).max() <= STEP


def test_wav_is_llm_speak_within_a_step(served, spoken):
    import soundfile

    resp = _speech(served, ONE)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "audio/wav"
    samples, rate = soundfile.read(io.BytesIO(resp.content), dtype="int16")
    assert rate == spoken["one"].sample_rate == 24_000
    _same_samples(samples, spoken["one"])
    with wave.open(io.BytesIO(resp.content)) as w:  # the stdlib reader parses it too
        assert (w.getnchannels(), w.getsampwidth(), w.getnframes()) == (1, 2, len(samples))


def test_pcm_plain_and_streamed_are_the_same_samples(served, spoken):
    plain = _speech(served, {**ONE, "response_format": "pcm"})
    assert plain.status_code == 200 and plain.headers["content-type"] == "audio/pcm"
    _same_samples(np.frombuffer(plain.content, "<i2"), spoken["one"])
    with httpx.stream("POST", served.url + "/v1/audio/speech", timeout=120,
                      json={**ONE, "response_format": "pcm", "stream_format": "audio"}) as resp:
        assert resp.status_code == 200
        chunks = list(resp.iter_bytes())
    assert b"".join(chunks) == plain.content


def test_the_openai_client_speaks(served, spoken):
    import openai

    client = openai.OpenAI(api_key="x", base_url=served.url + "/v1", max_retries=0, timeout=60)
    name = httpx.get(served.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    body = dict(model=name, input=ONE["input"], voice="0",
                extra_body={"max_frames": ONE["max_frames"]})
    with wave.open(io.BytesIO(client.audio.speech.create(**body).content)) as w:
        assert w.getframerate() == spoken["one"].sample_rate
        _same_samples(np.frombuffer(w.readframes(w.getnframes()), "<i2"), spoken["one"])
    with client.audio.speech.with_streaming_response.create(
            **body, response_format="pcm", stream_format="audio") as resp:
        pcm = b"".join(resp.iter_bytes())
    _same_samples(np.frombuffer(pcm, "<i2"), spoken["one"])


def test_two_concurrent_requests_each_get_their_speech(served, spoken):
    import soundfile

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda body: _speech(served, body), [ONE, TWO]))
    for resp, key in zip(answers, ("one", "two"), strict=True):
        assert resp.status_code == 200, resp.text
        samples, _ = soundfile.read(io.BytesIO(resp.content), dtype="int16")
        _same_samples(samples, spoken[key])


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_each_field_behaves_as_the_table_says(served, row):
    if row.accepted is not None:
        resp = _speech(served, {**BASE, **row.accepted})
        assert resp.status_code == 200, resp.text
        assert "x-mstar-ignored-fields" not in resp.headers  # a known field, never "unknown"
    if row.refused is not None:
        check_refused(_speech(served, {**BASE, **row.refused}), row)


def test_every_body_field_has_a_row_and_the_docs_table_is_the_code(served):
    schema = httpx.get(served.url + "/openapi.json", timeout=10).json()
    ref = schema["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][ref]["properties"]) == {r.name for r in ROWS}
    text = DOCS.read_text()
    start = text.index(".. speech-table-start") + len(".. speech-table-start\n\n")
    assert text[start:text.index(".. speech-table-end")].strip() == rst_table(("speech",)).strip()


@pytest.mark.parametrize("field, value", [
    ("response_format", "aac"), ("speed", 1.5), ("voice", "alloy"), ("voice", "10"),
    ("instructions", "Cheerfully."), ("stream_format", "jsonl"), ("max_frames", 0),
    ("max_frames", 100_000), ("input", ""), ("model", "no-such-model")])
def test_a_bad_field_is_refused_by_name(served, field, value):
    resp = _speech(served, {**ONE, field: value})
    assert resp.status_code == (404 if field == "model" else 400), resp.text
    assert resp.json()["error"]["param"] == field


def test_wav_events_are_refused_naming_stream_format(served):
    resp = _speech(served, {**ONE, "stream_format": "sse"})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "stream_format"


def test_a_streamed_wav_parses_and_is_the_whole_wavs_samples(served, spoken):
    """The openai client's streaming response reads a WAV that starts before its length is
    known (header first, sizes 0xFFFFFFFF), then pcm as each window decodes; Python's ``wave``
    parses it and its samples are the non-streamed WAV's, byte for byte."""
    import openai

    client = openai.OpenAI(api_key="x", base_url=served.url + "/v1", max_retries=0, timeout=60)
    name = httpx.get(served.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    body = dict(model=name, input=ONE["input"], voice="0",
                extra_body={"max_frames": ONE["max_frames"]})
    with wave.open(io.BytesIO(client.audio.speech.create(**body).content)) as w:
        whole = w.readframes(w.getnframes())
    with client.audio.speech.with_streaming_response.create(
            **body, response_format="wav", stream_format="audio") as resp:
        assert resp.headers["content-type"] == "audio/wav"
        chunks = list(resp.iter_bytes())
    streamed = b"".join(chunks)
    assert streamed[4:8] == streamed[40:44] == b"\xff" * 4  # RIFF and data sizes unknown
    with wave.open(io.BytesIO(streamed)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24_000)
        samples = w.readframes(w.getnframes())
    assert samples == whole and len(whole) > 0
    _same_samples(np.frombuffer(samples, "<i2"), spoken["one"])


def test_sse_events_carry_the_same_samples(served, spoken):
    resp = _speech(served, {**ONE, "response_format": "pcm", "stream_format": "sse"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(block.removeprefix("data: "))
              for block in resp.text.strip().split("\n\n")]
    *deltas, done = events
    assert {e["type"] for e in deltas} == {"speech.audio.delta"}
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    _same_samples(np.frombuffer(pcm, "<i2"), spoken["one"])
    assert done["type"] == "speech.audio.done"
    assert done["usage"]["output_tokens"] == len(spoken["one"].codes)
    assert done["usage"]["total_tokens"] == sum(
        done["usage"][k] for k in ("input_tokens", "output_tokens"))


def _sse_frames(resp: httpx.Response) -> int:
    """The frames a ``stream_format: sse`` answer's done event counts."""
    assert resp.status_code == 200, resp.text
    done = json.loads(resp.text.strip().split("\n\n")[-1].removeprefix("data: "))
    assert done["type"] == "speech.audio.done"
    return done["usage"]["output_tokens"]


def test_unset_max_frames_is_the_seconds_bound(served):
    body = {"input": ONE["input"], "response_format": "pcm", "stream_format": "sse"}
    assert _sse_frames(_speech(served, body)) == BOUND_FRAMES
    assert _sse_frames(_speech(served, {**body, "max_frames": BOUND_FRAMES})) == BOUND_FRAMES


def test_max_frames_over_the_seconds_bound_names_the_field_and_the_knob(served):
    resp = _speech(served, {**ONE, "max_frames": BOUND_FRAMES + 1})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "max_frames"
    assert "MSTAR_MAX_SPEECH_SECONDS" in resp.json()["error"]["message"]


def test_input_over_the_character_bound_names_the_field_and_the_knob(served):
    assert _speech(served, {**BASE, "input": "a" * INPUT_CHARS}).status_code == 200
    resp = _speech(served, {**BASE, "input": "a" * (INPUT_CHARS + 1)})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "input"
    assert "MSTAR_MAX_SPEECH_INPUT_CHARS" in resp.json()["error"]["message"]


def test_llm_speak_without_max_frames_makes_the_seconds_bound(speech_csm):
    """Offline too, an unset bound is MSTAR_MAX_SPEECH_SECONDS' frames (0.4 s: 5 frames)."""
    from mstar import LLM

    llm = LLM(model=str(speech_csm), device="cpu", dtype="float32", kv_block_size=4,
              num_kv_blocks=64, max_speech_seconds=0.4)
    (speech,) = llm.speak("Hello there.")
    assert len(speech.codes) == 5


def test_a_speech_model_refuses_the_text_routes(served):
    for path, body in (("/v1/completions", {"prompt": "Hi", "max_tokens": 2}),
                       ("/v1/chat/completions", {"messages": [{"role": "user",
                                                               "content": "Hi"}]})):
        resp = httpx.post(served.url + path, json=body, timeout=60)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "model"
        assert "/v1/audio/speech" in resp.json()["error"]["message"]


def test_a_text_model_refuses_speech_naming_model(tiny_tokenizer):
    app, engine = stub_app(tiny_tokenizer)
    resp = TestClient(app).post("/v1/audio/speech", json=ONE)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "model"
    assert "does not speak" in resp.json()["error"]["message"]
    assert engine.submitted == []



def test_audio_waiting_for_a_slow_reader_counts_against_its_bound():
    from mstar.api_server.generation.unread import cost
    from mstar.engine.request.outputs import AudioChunk
    from mstar.output.processor import TextOutput

    silent = TextOutput("r", [5])
    spoken = TextOutput("r", [5], new_audio=AudioChunk(bytes(4000), 24_000))
    assert cost(spoken) - cost(silent) == 4000
