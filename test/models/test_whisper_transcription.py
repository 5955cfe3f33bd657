"""Whisper's pure transcription logic (mstar.prompt.transcription) against transformers' rules:
the decoder prompt, segments from timestamp pairs, and where the next 30 s window starts."""

from __future__ import annotations

import pytest

from mstar.prompt.transcription import (
    LongForm,
    TranscriptionError,
    WhisperTokens,
    decoder_prompt,
    split_segments,
)

GEN = {"decoder_start_token_id": 50257, "eos_token_id": 50256, "no_timestamps_token_id": 50362,
       "suppress_tokens": [1, 50360, 50361], "is_multilingual": False}
EN = WhisperTokens.from_generation_config(GEN)
MULTI = WhisperTokens.from_generation_config(
    GEN | {"is_multilingual": True, "decoder_start_token_id": 50258, "no_timestamps_token_id": 50363,
           "lang_to_id": {"<|en|>": 50259, "<|de|>": 50261},
           "task_to_id": {"transcribe": 50359, "translate": 50358}})
T0 = EN.timestamp_begin  # <|0.00|>


def ts(seconds: float) -> int:
    return T0 + round(seconds / 0.02)


def test_decoder_prompts():
    assert decoder_prompt(EN) == [50257, 50362]
    assert decoder_prompt(EN, timestamps=True) == [50257]
    assert decoder_prompt(EN, prompt_ids=(7, 8)) == [50360, 7, 8, 50257, 50362]
    assert decoder_prompt(MULTI, "de", "translate") == [50258, 50261, 50358, 50363]
    with pytest.raises(TranscriptionError) as err:
        decoder_prompt(MULTI)
    assert err.value.field == "language"
    with pytest.raises(TranscriptionError):
        decoder_prompt(EN, task="translate")


def test_segments_from_timestamp_pairs():
    out = [ts(0), 11, 12, ts(1.5), ts(1.5), 13, ts(2.0), 50256]
    segments, advance = split_segments(EN, out, 0, 3000)
    assert [(s.start, s.end) for s in segments] == [(0.0, 1.5), (1.5, 2.0)]
    assert advance == 3000  # a single timestamp at the end: the window is done


def test_cut_mid_speech_seeks_to_the_last_complete_segment():
    out = [ts(0), 11, ts(10.0), ts(10.0), 12, ts(29.0), ts(29.0), 13]  # cut inside the third
    segments, advance = split_segments(EN, out, 3000, 3000)
    assert [(s.start, s.end) for s in segments] == [(30.0, 40.0), (40.0, 59.0)]
    assert advance == 29.0 / 0.02 * 2  # frames to the last timestamp


def test_no_timestamps_is_one_segment_over_the_window():
    segments, advance = split_segments(EN, [11, 12, 50256], 0, 1200)
    assert [(s.start, s.end, s.token_ids) for s in segments] == [(0.0, 12.0, (11, 12))]
    assert advance == 1200


def test_long_form_windows():
    plan = LongForm(EN, 7000)
    assert plan.window() == (0, 3000)
    plan.done([ts(0), 11, ts(20.0), ts(20.0), 12])  # cut: resume at 20 s
    assert plan.window() == (2000, 3000)
    plan.done([11, 12])
    assert plan.window() == (5000, 2000)
    plan.done([11])
    assert plan.window() is None
    assert [round(s.start, 2) for s in plan.segments] == [0.0, 20.0, 50.0]
