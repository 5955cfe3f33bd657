"""Speculative decoding in the dtype MSTAR_DTYPE=auto picks on this machine (bf16 on CPUs with
native bf16 or the bf16-weight kernel, and on CUDA).

What speculation promises there (``MSTAR_SPECULATIVE_METHOD``'s description, docs/engine.rst):
a verify forward computes several positions of a row at once, and in a 16-bit dtype its rounding
differs from a one-token step's, so greedy output may leave plain decoding's at a near tie, as a
batch of another size may (plain bf16 decoding is not batch invariant either). So the test holds
the output to exactly that: identical up to the first token where the two differ, and there the
plain step's two best tokens lie within bf16 rounding of each other."""

from __future__ import annotations

import math

import pytest
import torch

from mstar.engine.placement import resolve_device_dtype
from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

# speculative_gate=False: every proposed draft is verified, whatever this machine's step timings
# (the gate itself: test_speculative_gate.py).
MAX_NEW = 32
TEXTS = [
    "one two three four five six seven. one two three four five six seven. one two three",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Paris is the capital of France, and Berlin is the capital of Germany. Paris is",
    "a b c d a b c d a b c d a b",
    "Hello",
    "red green blue red green blue red green",
]
NEAR_TIE = 0.25  # nats: logits of a few units are 1/32..1/16 apart in bf16, and grow through layers


def _decode(engine, prompts) -> dict[str, tuple[list[int], list]]:
    """Greedy, in one batch: each request's tokens and per token its top-2 logprobs."""
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                                           logprobs=2, ignore_eos=True))
    out = {f"r{i}": ([], []) for i in range(len(prompts))}
    while engine.has_unfinished_requests():
        for o in engine.step():
            out[o.request_id][0].extend(o.new_token_ids)
            out[o.request_id][1].extend(o.logprobs or [])
    return out


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_auto_dtype_speculation_leaves_plain_decoding_only_at_a_near_tie(
        family, tiny_model_dir, make_engine, tiny_tokenizer):
    settings = {"dtype": "auto", "kv_block_size": 4, "num_kv_blocks": 256}
    model_dir = tiny_model_dir(family)
    _, dtype = resolve_device_dtype(WorkerSettings(model=str(model_dir), **settings), model_dir)
    prompts = [tiny_tokenizer.encode(t) for t in TEXTS]
    plain = _decode(make_engine(model_dir, **settings), prompts)
    engine = make_engine(model_dir, **settings, speculative_method="ngram", speculative_gate=False,
                         num_speculative_tokens=4, speculative_min_acceptance=0.0)
    spec = _decode(engine, prompts)
    assert engine.speculation.stats.accepted > 0
    for rid, (tokens, logprobs) in plain.items():
        got = spec[rid][0]
        assert len(got) == len(tokens) == MAX_NEW
        first = next((i for i, (a, b) in enumerate(zip(tokens, got, strict=True)) if a != b),
                     None)
        if first is None:
            continue
        assert dtype != torch.float32, f"{rid}: float32 keeps tokens identical"
        (best, best_lp), (second, second_lp) = logprobs[first].top[:2]
        assert got[first] in (best, second) and math.isclose(best_lp, second_lp,
                                                              abs_tol=NEAR_TIE), (
            f"{rid} left plain decoding at token {first} without a near tie")
