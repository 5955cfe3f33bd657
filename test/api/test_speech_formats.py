"""POST /v1/audio/speech's encoded formats (``api_server.media.sound_formats``), through the
served tiny CSM the speech tests share (test/speech_server.py; 24 kHz, so no format resamples):
flac, mp3 and opus decode (``soundfile``) to the pcm answer's samples, count for count, mono, at
24 kHz (mp3 through the official openai client too); opus streams (its bytes decode to the whole
file's samples), flac and mp3 do not (a 400 naming both fields), and neither does anything but
pcm in events; aac is refused by name. Beside the server, a codec rate that MP3 or Opus does
not take is resampled to the next rate they do.

How close each decode must be to the pcm answer's 16-bit samples:

- flac is lossless: equal.
- Length: libsndfile trims both lossy codecs' encoder delay and padding (LAME's info frame,
  Ogg Opus's pre-skip and last granule), so the count is the pcm answer's exactly.
- Waveform, by correlation (``MIN_CORRELATION``). The random tiny CSM's waveform is mostly a
  6 kHz pattern of period 4, which LAME's lowpass at 24 kHz drops, so mp3 is compared in the band
  under it (both through a 4-sample moving average, which nulls 6 and 12 kHz): measured 0.975
  there; opus keeps the band whole, 0.971. The same decodes shifted by one sample measure at
  most 0.90 (mp3) and 0.79 (opus), and audio resampled by 2/3 about 0.75; a wrong rate or
  channel count fails the rate and shape checks first.
"""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest

RATE = 24_000
BODY = {"input": "Hello there.", "voice": "0", "max_frames": 25}  # 200 samples of the tiny Mimi
MIN_CORRELATION = 0.93


@pytest.fixture(scope="module")
def pcm(speech_server) -> np.ndarray:
    resp = _speech(speech_server, {**BODY, "response_format": "pcm"})
    assert resp.status_code == 200, resp.text
    return np.frombuffer(resp.content, "<i2")


def _speech(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/speech", json=body, timeout=120)


def _decoded(data: bytes) -> tuple[np.ndarray, int]:
    """The samples (16-bit, [samples, channels]) and the rate soundfile decodes."""
    import soundfile

    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16", always_2d=True)
    return samples, rate


def _band(x: np.ndarray) -> np.ndarray:
    """Under 6 kHz at 24 kHz: a 4-sample moving average (nulls at 6 and 12 kHz)."""
    return np.convolve(x.astype(np.float64), np.ones(4) / 4, mode="same")


def _correlation(decoded: np.ndarray, pcm: np.ndarray, name: str) -> float:
    if name == "mp3":
        decoded, pcm = _band(decoded), _band(pcm)
    return float(np.corrcoef(decoded.astype(np.float64), pcm.astype(np.float64))[0, 1])


@pytest.mark.parametrize("name, media_type", [
    ("flac", "audio/flac"), ("mp3", "audio/mpeg"), ("opus", "audio/ogg")])
def test_each_format_decodes_to_the_pcm_answer(speech_server, pcm, name, media_type):
    resp = _speech(speech_server, {**BODY, "response_format": name})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == media_type
    samples, rate = _decoded(resp.content)
    assert rate == RATE and samples.shape == (len(pcm), 1) and len(pcm) > 0
    if name == "flac":
        assert np.array_equal(samples[:, 0], pcm)
    else:
        assert _correlation(samples[:, 0], pcm, name) >= MIN_CORRELATION


def test_streamed_opus_decodes_to_the_whole_files_samples(speech_server, pcm):
    whole = _speech(speech_server, {**BODY, "response_format": "opus"})
    with httpx.stream("POST", speech_server.url + "/v1/audio/speech", timeout=120,
                      json={**BODY, "response_format": "opus",
                            "stream_format": "audio"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"] == "audio/ogg"
        streamed = b"".join(resp.iter_bytes())
    assert streamed[:4] == b"OggS"
    samples, rate = _decoded(streamed)
    assert rate == RATE and np.array_equal(samples, _decoded(whole.content)[0])
    assert len(samples) == len(pcm)


@pytest.mark.parametrize("stream_format, response_format", [
    ("audio", "flac"), ("audio", "mp3"), ("sse", "opus"), ("sse", "flac"), ("sse", "mp3")])
def test_a_format_that_cannot_stream_so_is_refused_naming_both_fields(speech_server,
                                                                      stream_format,
                                                                      response_format):
    resp = _speech(speech_server, {**BODY, "response_format": response_format,
                                   "stream_format": stream_format})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "stream_format"
    assert "`response_format`" in error["message"] and repr(response_format) in error["message"]


def test_aac_is_refused_by_name(speech_server):
    resp = _speech(speech_server, {**BODY, "response_format": "aac"})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == "response_format" and "'aac'" in error["message"]
    assert "no AAC encoder" in error["message"]


@pytest.mark.parametrize("name, rate, encoded_at", [
    ("mp3", 22_050, 22_050), ("opus", 22_050, 24_000), ("opus", 44_100, 48_000),
    ("mp3", 50_000, 48_000), ("flac", 22_050, 22_050)])
def test_a_rate_the_codec_does_not_take_is_resampled_to_the_next_it_does(name, rate,
                                                                         encoded_at):
    """Beside the server (CSM is 24 kHz): a 300 Hz tone, whole and streamed (opus), decodes at
    the next rate the codec takes, as long as the tone (within soxr's and the codec's edges)."""
    from mstar.api_server.media.sound_formats import StreamedSound, encode

    tone = np.round(0.4 * 32767 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate))
    pcm = tone.astype("<i2").tobytes()
    answers = [encode(name, pcm, rate)]
    if name == "opus":
        sound = StreamedSound(name, rate)
        answers.append(b"".join([sound.push(pcm[i:i + 4000]) for i in range(0, len(pcm), 4000)]
                                + [sound.finish()]))
    for data in answers:
        samples, decoded_rate = _decoded(data)
        assert decoded_rate == encoded_at and samples.shape[1] == 1
        assert abs(len(samples) - encoded_at) <= 0.01 * encoded_at  # one second of audio


def test_the_openai_client_gets_mp3(speech_server, pcm):
    """OpenAI's default format, through the official client (it sends what it is given)."""
    import openai

    client = openai.OpenAI(api_key="x", base_url=speech_server.url + "/v1", max_retries=0,
                           timeout=60)
    name = httpx.get(speech_server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    speech = client.audio.speech.create(model=name, input=BODY["input"], voice="0",
                                        response_format="mp3",
                                        extra_body={"max_frames": BODY["max_frames"]})
    samples, rate = _decoded(speech.content)
    assert rate == RATE and samples.shape == (len(pcm), 1)
    assert _correlation(samples[:, 0], pcm, "mp3") >= MIN_CORRELATION
