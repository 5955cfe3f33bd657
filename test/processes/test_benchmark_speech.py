"""The speech-out benchmark (``benchmark.speech_out``, ``python -m benchmark.audio --speech-out``)
at tiny sizes: it saves its tiny CSM, serves it, and each round's rows count the audio the
requests made (every request's frames at CSM's 12.5 a second), each request's first audio before
the round's end, and the table and the unmeasured text row are printed."""

from __future__ import annotations

import pytest

from benchmark import speech_out
from mstar.models.speech.utterance import FRAMES_PER_SECOND

FRAMES = 8  # two codec windows a request


@pytest.fixture(scope="module")
def rows():
    return speech_out.run(FRAMES, 1, [], (1, 3))


def test_rows_count_the_audio_and_the_first_chunk_comes_first(rows):
    assert [row.concurrency for row in rows] == [1, 3]
    for row in rows:
        assert row.audio_s == pytest.approx(row.concurrency * FRAMES / FRAMES_PER_SECOND)
        assert len(row.first_audio_s) == row.concurrency
        assert 0 < min(row.first_audio_s) <= max(row.first_audio_s) < row.wall_s
        assert row.rtf == pytest.approx(row.audio_s / row.wall_s)


def test_the_report_prints_the_table_and_what_is_not_measured(rows, capsys):
    speech_out.report(rows, FRAMES)
    out = capsys.readouterr().out
    assert "| 1 |" in out and "| 3 |" in out
    assert speech_out.NO_TEXT in out
