"""Whisper in the engine, token-exact with transformers' generate (greedy, fp32, CPU) on a tiny
random Whisper: alone, batched (different audio), prefill in chunks, under preemption, and with
prefix caching (the audio's hash is in the block hashes: the decoder prompt is the same for
every clip, and its K/V past layer 0 depend on the audio)."""

from __future__ import annotations

import pytest
from whisper_helpers import clip, hf_greedy, make_whisper_dir

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

MAX_NEW = 12
PROMPT_TEXT = (10, 20, 30, 40, 50, 60)  # a previous text's ids, after <|startofprev|>
# (tone Hz, noise seed, timestamps, prompt text): clips the tiny model transcribes differently
CLIPS = {"a": (440, 0, False, ()), "b": (660, 2, True, ()), "c": (880, 1, False, ()),
         "pa": (440, 0, False, PROMPT_TEXT), "pc": (880, 1, False, PROMPT_TEXT)}
SHORT = ["a", "b", "c"]


@pytest.fixture(scope="module")
def whisper_dir(tmp_path_factory):
    return make_whisper_dir(tmp_path_factory.mktemp("tiny-whisper"))


@pytest.fixture(scope="module")
def cases(whisper_dir):
    """name -> (decoder prompt, AudioInput, transformers' output)."""
    from transformers import WhisperFeatureExtractor
    from whisper_helpers import generation_config

    from mstar.models.audio.whisper_features import whisper_input
    from mstar.prompt.transcription import WhisperTokens, decoder_prompt

    fe = WhisperFeatureExtractor.from_pretrained(whisper_dir)
    tokens = WhisperTokens.from_generation_config(generation_config(whisper_dir))
    out = {}
    for name, (freq, seed, timestamps, text) in CLIPS.items():
        audio = whisper_input(fe, clip(freq, seed=seed))
        prompt = decoder_prompt(tokens, timestamps=timestamps, prompt_ids=text)
        expected = hf_greedy(whisper_dir, audio.tensors["input_features"], prompt, MAX_NEW,
                             timestamps)
        out[name] = (prompt, audio, expected)
    assert len({tuple(out[n][2]) for n in SHORT}) == 3 and out["pa"][2] != out["pc"][2]
    return out


def engine(model_dir, **overrides) -> LLMEngine:
    """An fp32 engine whose schedule does not depend on step times (no prefill share)."""
    return LLMEngine(WorkerSettings(model=str(model_dir), device="cpu", dtype="float32",
                                    prefill_share_beside_decodes=0.0, **overrides))


def run(eng: LLMEngine, cases: dict, names: list[str]) -> dict[str, list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    for i, name in enumerate(names):
        prompt, audio, _ = cases[name]
        eng.add_request(f"{name}-{i}-{id(names)}", prompt, params, (audio,))
    got: dict[str, list[int]] = {}
    while eng.has_unfinished_requests():
        for out in eng.step():
            got.setdefault(out.request_id.split("-")[0], []).extend(out.new_token_ids)
    return got


@pytest.fixture(scope="module")
def plain(whisper_dir):
    return engine(whisper_dir)


def test_alone_and_batched(plain, cases):
    for name in SHORT:
        assert run(plain, cases, [name]) == {name: cases[name][2]}
    assert run(plain, cases, list(cases)) == {n: c[2] for n, c in cases.items()}


def test_prefill_in_chunks(whisper_dir, cases):
    eng = engine(whisper_dir, max_prefill_chunk_tokens=3)  # the 10-token prompts: 4 chunks
    assert run(eng, cases, ["pa", "pc", "b"]) == {n: cases[n][2] for n in ("pa", "pc", "b")}


def test_preemption_recomputes_the_cross_states(whisper_dir, cases):
    eng = engine(whisper_dir, kv_block_size=2, num_kv_blocks=10, enable_prefix_caching=False)
    assert run(eng, cases, SHORT) == {n: cases[n][2] for n in SHORT}
    assert eng.scheduler.num_preemptions > 0


def logprobs_of(eng: LLMEngine, case) -> tuple[list[int], list[float], int]:
    """One request's tokens, their logprobs and its cached prompt tokens."""
    prompt, audio, _ = case
    eng.add_request("lp", prompt, SamplingParams(temperature=0.0, max_tokens=MAX_NEW, logprobs=0),
                    (audio,))
    outs = []
    while eng.has_unfinished_requests():
        outs += eng.step()
    return ([t for o in outs for t in o.new_token_ids],
            [lp.logprob for o in outs for lp in o.logprobs], outs[-1].num_cached_tokens)


def test_prefix_cache_keys_on_the_audio(whisper_dir, cases, plain):
    """Same decoder prompt, other audio: no cached block may cross clips (the K/V past layer 0
    depend on the audio: a wrong hit shows in the logprobs); the same clip hits."""
    eng = engine(whisper_dir, kv_block_size=2)
    assert run(eng, cases, ["pc"]) == {"pc": cases["pc"][2]}
    tokens, logprobs, cached = logprobs_of(eng, cases["pa"])  # pc's prompt blocks are cached
    want_tokens, want, _ = logprobs_of(plain, cases["pa"])  # no block cached (16 tokens a block)
    assert tokens == want_tokens == cases["pa"][2]
    assert cached == 0
    assert logprobs == pytest.approx(want, abs=1e-4)
    tokens, logprobs, cached = logprobs_of(eng, cases["pa"])  # the same clip: a hit, same output
    assert (tokens, cached) == (want_tokens, 8)
    assert logprobs == pytest.approx(want, abs=1e-4)


def test_offline_transcribe_is_generate(whisper_dir, cases):
    """``mstar.LLM.transcribe`` on samples: the window's tokens are generate's (up to the
    model's length), as one segment over the 30 s window."""
    import mstar

    llm = mstar.LLM(str(whisper_dir), device="cpu", dtype="float32")
    freq, seed, _, _ = CLIPS["a"]
    prompt, audio, _ = cases["a"]
    limit = llm.engine.max_model_len - len(prompt)
    expected = hf_greedy(whisper_dir, audio.tensors["input_features"], prompt, limit, False)
    result = llm.transcribe(clip(freq, seed=seed))
    assert [(s.start, s.end) for s in result.segments] == [(0.0, 30.0)]
    eos = llm.tokenizer.eos_token_id
    assert list(result.segments[0].token_ids) == [t for t in expected if t != eos]
    assert result.text == llm.tokenizer.decode([t for t in expected if t < eos])
