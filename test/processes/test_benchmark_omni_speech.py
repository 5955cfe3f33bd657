"""The Qwen3-Omni speech-out benchmark (``benchmark.speech_omni``, ``python -m benchmark.audio
--speech-out --model omni``) at tiny sizes, one chat a round: it saves the tests' tiny
Qwen3-Omni, serves it, and its row holds each spoken chat's text tokens, audio and first audio
(in an SSE event before the last transcript delta: code2wav's windows here are shorter than the
reply), the text-only chat's tokens and no audio, and the table is printed. No timing is
asserted."""

from __future__ import annotations

import pytest

from benchmark import speech_omni

TOKENS = 12  # three of the served code2wav windows' 4 frames
# windows of 4 frames after 8 (the default 25 would come after this reply's text)
ENV = ["MSTAR_SPEECH_CHUNK_FRAMES=4", "MSTAR_SPEECH_LEFT_CONTEXT=8"]


@pytest.fixture(scope="module")
def row():
    rows = speech_omni.run(TOKENS, 1, ENV, (1,))
    assert [r.concurrency for r in rows] == [1]
    return rows[0]


def test_a_spoken_chat_counts_its_text_and_audio(row):
    (spoken,) = row.spoken.results
    assert spoken.output_tokens == TOKENS
    assert spoken.audio_bytes > 0 and spoken.audio_bytes % speech_omni.BYTES_PER_SAMPLE == 0
    assert row.audio_first == 1  # its first audio came in an event before its last text
    assert 0 < spoken.first_audio < spoken.last_token
    # the tiny code2wav's 8 samples a frame at 12.5 frames a second
    assert row.frame_rate == 100
    assert row.audio_s == pytest.approx(spoken.audio_bytes / 2 / row.frame_rate)
    assert row.rtf == pytest.approx(row.audio_s / row.spoken.wall_s)


def test_a_text_only_chat_makes_no_audio(row):
    (text,) = row.text_only.results
    assert text.output_tokens == TOKENS
    assert text.audio_bytes == 0 and text.first_audio is None
    assert row.text_only.tok_s == pytest.approx(TOKENS / text.last_token)


def test_the_report_prints_the_row(row, capsys):
    speech_omni.report([row], TOKENS)
    out = capsys.readouterr().out
    assert "| 1 |" in out and "| 1 of 1 |" in out and "text tok/s, audio off" in out
