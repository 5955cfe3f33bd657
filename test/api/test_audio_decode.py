"""Audio at the API's edge: each container decodes to mono at the model's rate, and every damaged
or oversized file is a 4xx naming the part, decided before (or bounding) the decode."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest
from audio_files import cut, encoded, lying_wav

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.audio_decode import decode_clip, read_header
from mstar.api_server.media.audio_loader import AudioLimits, AudioPart, load_clips

P = "messages.0.content.1.input_audio"
RATE = 16_000
LIMITS = AudioLimits(max_bytes=1 << 20, max_seconds=10.0, max_request_seconds=12.0, max_parts=4)


def clip(data: bytes, rate: int = RATE, max_seconds: float = 10.0) -> np.ndarray:
    return decode_clip(data, read_header(data, max_seconds, P), rate, P)


def refused(fn, *args) -> APIError:
    with pytest.raises(APIError) as err:
        fn(*args)
    return err.value


def load(parts: list[AudioPart], limits: AudioLimits = LIMITS) -> list[np.ndarray]:
    return asyncio.run(load_clips(parts, limits, RATE, 60.0))


@pytest.mark.parametrize("fmt,subtype,rate", [("WAV", None, 16_000), ("FLAC", None, 16_000),
                                              ("OGG", "VORBIS", 16_000), ("OGG", "OPUS", 48_000),
                                              ("MP3", None, 16_000)])
def test_each_format_decodes_to_mono_at_the_model_rate(fmt, subtype, rate):
    samples = clip(encoded(fmt, 1.0, rate, subtype=subtype))
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) - RATE) < RATE * 0.1  # codecs pad a little (MP3, Opus)
    assert 0.15 < float(np.abs(samples).max()) < 0.45


def test_stereo_is_mixed_down_and_44k1_resampled():
    samples = clip(encoded("WAV", 2.0, 44_100, channels=2))
    assert samples.shape == (2 * RATE,)
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(int(spectrum.argmax()) * RATE / len(samples) - 440) < 2  # still a 440 Hz tone


@pytest.mark.parametrize("data,why", [
    (b"", "empty"),
    (b"not audio at all" * 64, "not a WAV"),
    (b"\xff\xfb\x90\x00" + bytes(range(256)) * 8, "not a WAV"),  # an MP3 frame sync, then junk
    (encoded("WAV")[:44], "truncated"),  # a header, no samples though it announces them
    (encoded("WAV", seconds=0.0), "no samples"),
])
def test_empty_unknown_and_corrupt_files_are_400(data, why):
    err = refused(clip, data)
    assert (err.status, err.param) == (400, P) and why in err.message


def test_an_unlisted_container_is_refused_by_name():
    err = refused(clip, encoded("AIFF", subtype="PCM_16"))
    assert (err.status, err.param) == (400, P) and "AIFF" in err.message


def test_a_wav_header_claiming_hours_is_refused_before_decoding():
    err = refused(read_header, lying_wav(), 10.0, P)
    assert (err.status, err.param) == (413, P) and "MSTAR_MAX_AUDIO_SECONDS" in err.message


def test_a_wav_header_claiming_more_than_the_file_holds_is_400():
    err = refused(read_header, lying_wav(64_000), 10.0, P)  # says 2 s, holds 1 s
    assert (err.status, err.param) == (400, P) and "truncated" in err.message


@pytest.mark.parametrize("fmt", ["WAV", "MP3", "FLAC", "OGG"])
def test_a_file_cut_short_is_400(fmt):
    err = refused(clip, cut(encoded(fmt, 2.0)))
    assert (err.status, err.param) == (400, P)


def test_a_header_longer_than_the_bound_is_413_without_decoding():
    err = refused(read_header, encoded("FLAC", 3.0), 2.0, P)
    assert (err.status, err.param) == (413, P)


def test_input_audio_format_must_name_the_data():
    wav = base64.b64encode(encoded("WAV")).decode()
    for stated, why in (("mp3", "its data is wav"), ("aac", "not one of")):
        with pytest.raises(APIError) as err:
            load([AudioPart(P, wav, stated)])
        assert (err.value.status, err.value.param) == (400, f"{P}.format"), err.value.message
        assert why in err.value.message
    ogg = base64.b64encode(encoded("OGG", subtype="OPUS", rate=48_000)).decode()
    assert len(load([AudioPart(P, ogg, "opus")])[0]) > 0  # opus names an OGG container


def test_bytes_and_base64_bounds_name_the_part():
    big = encoded("WAV", 1.0)
    small = AudioLimits(len(big) - 1, 10.0, 10.0, 4)
    for payload in (big, base64.b64encode(big).decode()):
        with pytest.raises(APIError) as err:
            load([AudioPart(P, payload, None)], small)
        assert (err.value.status, err.value.param) == (413, P)
    with pytest.raises(APIError) as err:
        load([AudioPart(P, "@@not base64@@", "wav")])
    assert (err.value.status, err.value.param) == (400, f"{P}.data")


def test_request_seconds_are_summed_in_part_order():
    parts = [AudioPart(f"messages.0.content.{j}.input_audio", encoded("WAV", 5.0)) for j in
             range(3)]
    with pytest.raises(APIError) as err:
        load(parts)  # 5 + 5 fit in 12 s; the third takes the sum to 15
    assert (err.value.status, err.value.param) == (413, "messages.0.content.2.input_audio")
    assert [len(c) for c in load(parts[:2])] == [5 * RATE, 5 * RATE]
