"""Whisper's no-speech probability on a tiny random Whisper: the engine's equals the softmax of
transformers' logits at <|startoftranscript|>, taken at <|nocaptions|> (what transformers'
``WhisperNoSpeechDetection`` computes), with the prompt's start at position 0 or after a
previous text, in one prefill or in chunks; it comes once per request, with its first token; and
``mstar.LLM.transcribe``'s no-speech check drops a window on that same number."""

from __future__ import annotations

import pytest
from whisper_helpers import clip, generation_config, make_whisper_dir

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

PROMPT_TEXT = (10, 20, 30, 40, 50, 60)  # a previous text: <|startoftranscript|> at position 7
CLIPS = {"a": (440, 0, ()), "c": (880, 1, ()), "pa": (440, 0, PROMPT_TEXT)}


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return make_whisper_dir(tmp_path_factory.mktemp("tiny-whisper"))


@pytest.fixture(scope="module")
def cases(whisper_dir):
    """name -> (decoder prompt, AudioInput, transformers' no-speech probability)."""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    from mstar.models.audio.whisper_features import whisper_input
    from mstar.prompt.transcription import WhisperTokens, decoder_prompt

    fe = WhisperFeatureExtractor.from_pretrained(whisper_dir)
    tokens = WhisperTokens.from_generation_config(generation_config(whisper_dir))
    model = WhisperForConditionalGeneration.from_pretrained(whisper_dir, dtype=torch.float32)
    out = {}
    for name, (freq, seed, text) in CLIPS.items():
        audio = whisper_input(fe, clip(freq, seed=seed))
        prompt = decoder_prompt(tokens, prompt_ids=text)
        with torch.inference_mode():
            logits = model(input_features=audio.tensors["input_features"],
                           decoder_input_ids=torch.tensor([prompt])).logits[0]
        probs = logits[prompt.index(tokens.start)].float().softmax(-1)
        out[name] = (prompt, audio, float(probs[tokens.no_speech]))
    assert len({round(p, 6) for _, _, p in out.values()}) == 3  # the check can tell them apart
    return out


def engine(whisper_dir, **overrides) -> LLMEngine:
    return LLMEngine(WorkerSettings(model=str(whisper_dir), device="cpu", dtype="float32",
                                    **overrides))


def no_speech(eng: LLMEngine, cases: dict) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Every case at once: the no-speech probabilities each request's outputs carried, and its
    prompt tokens served from the prefix cache."""
    params = SamplingParams(temperature=0.0, max_tokens=4)
    for name, (prompt, audio, _) in cases.items():
        eng.add_request(name, prompt, params, (audio,))
    got: dict[str, list[float]] = {name: [] for name in cases}
    cached: dict[str, int] = {}
    while eng.has_unfinished_requests():
        for out in eng.step():
            cached[out.request_id] = out.num_cached_tokens
            if out.no_speech_prob is not None:
                assert out.new_token_ids and out.num_output_tokens == len(out.new_token_ids)
                got[out.request_id].append(out.no_speech_prob)
    return got, cached


def expected(cases: dict, names) -> dict[str, list]:
    return {n: [pytest.approx(cases[n][2], rel=1e-4, abs=1e-7)] for n in names}


@pytest.mark.parametrize("overrides", [{}, {"max_prefill_chunk_tokens": 3}])
def test_the_engines_is_transformers(whisper_dir, cases, overrides):
    got, _ = no_speech(engine(whisper_dir, **overrides), cases)
    assert got == expected(cases, cases)  # once a request, with its first token


def test_a_start_served_from_the_prefix_cache_reports_it_too(whisper_dir, cases):
    eng = engine(whisper_dir, kv_block_size=2)
    again = {"pa": cases["pa"]}  # <|startoftranscript|> at 7: in the blocks cached by the first
    assert no_speech(eng, again) == (expected(cases, again), {"pa": 0})
    assert no_speech(eng, again) == (expected(cases, again), {"pa": 8})


def test_transcribe_skips_a_window_on_it(whisper_dir, cases):
    import mstar

    llm = mstar.LLM(str(whisper_dir), device="cpu", dtype="float32")
    audio, expected = clip(440, seed=0), cases["a"][2]
    kept = llm.transcribe(audio)
    assert kept.segments and kept.segments[0].no_speech_prob == pytest.approx(expected, rel=1e-4)
    # Every average logprob is under +100: the no-speech probability alone decides.
    above = llm.transcribe(audio, logprob_threshold=100.0, no_speech_threshold=expected * 0.99)
    below = llm.transcribe(audio, logprob_threshold=100.0, no_speech_threshold=expected * 1.01)
    assert above.segments == [] and below.text == kept.text and below.segments


@pytest.mark.parametrize("prob, ok", [(0.25, True), (0.0, True), (1.5, False),
                                      (float("nan"), False)])
def test_a_worker_sends_only_a_probability(prob, ok):
    from mstar.engine.request.outputs import RequestOutput
    from mstar.ipc import messages as m
    from mstar.ipc.inbox_checks import InboxBounds, Invalid, check

    msg = m.Outputs([RequestOutput("r", [1], no_speech_prob=prob)])
    if ok:
        check(msg, InboxBounds(replicas=1))
    else:
        with pytest.raises(Invalid, match="no_speech_prob"):
            check(msg, InboxBounds(replicas=1))
