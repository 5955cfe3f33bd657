"""Classifier heads (rerank, score, classify) against transformers, fp32 on CPU, batched: a
``*ForSequenceClassification`` checkpoint's ``score`` logits at the last token (Llama, Qwen2,
Qwen3), and a causal LM scoring with two tokens' logits (MSTAR_SCORE_TOKENS, Qwen3-Reranker)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from classifier_models import save_tiny_classifier
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector

TEXTS = ["Hello", "The quick brown fox jumps over the lazy dog.",
         "Paris is the capital of France.", "Numbers: 0 1 2 3 4 5 6 7 8 9"]
TOLERANCE = 1e-4
CLASSIFY = SamplingParams(pooling="classify")
PAIR = ("The", "is")  # one token each in the tiny vocabulary (Qwen3-Reranker's: no, yes)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory, tiny_tokenizer):
    """Factory: a tiny random ``<Family>ForSequenceClassification`` directory with ``labels``."""
    made = {}

    def make(family: str, labels: int):
        if (family, labels) not in made:
            path = tmp_path_factory.mktemp(f"cls-{family}-{labels}")
            made[(family, labels)] = save_tiny_classifier(path, family, labels, tiny_tokenizer)
        return made[(family, labels)]

    return make


def _engine_logits(engine, run, prompts) -> list[np.ndarray]:
    """Every prompt in one batch: each one's pooled classifier logits."""
    results = run(engine, {f"r{i}": (p, CLASSIFY) for i, p in enumerate(prompts)})
    return [bytes_vector(results[f"r{i}"]["embedding"]) for i in range(len(prompts))]


@pytest.mark.parametrize(("family", "labels"), [("llama", 3), ("qwen2", 1), ("qwen3", 2)])
def test_sequence_classification_logits_match_transformers(family, labels, classifier_dir,
                                                           make_engine, run, tiny_tokenizer):
    model_dir = classifier_dir(family, labels)
    prompts = [tiny_tokenizer.encode(t) for t in TEXTS]
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=128)
    got = _engine_logits(engine, run, prompts)
    reference = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    for ids, vector in zip(prompts, got, strict=True):
        with torch.inference_mode():
            want = reference(torch.tensor([ids])).logits[0].numpy()
        assert vector.shape == (labels,)
        assert np.abs(vector - want).max() < TOLERANCE, (family, ids)


def test_two_token_reranker_logits_match_transformers(tiny_model_dir, make_engine, run,
                                                      tiny_tokenizer):
    model_dir = tiny_model_dir("qwen3")
    no, yes = (tiny_tokenizer.encode(t, add_special_tokens=False)[0] for t in PAIR)
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=128,
                         score_tokens=f"{PAIR[0]}, {PAIR[1]}")
    prompts = [tiny_tokenizer.encode(t) for t in TEXTS]
    got = _engine_logits(engine, run, prompts)
    reference = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for ids, vector in zip(prompts, got, strict=True):
        with torch.inference_mode():
            want = reference(torch.tensor([ids])).logits[0, -1, [no, yes]].numpy()
        assert np.abs(vector - want).max() < TOLERANCE


def test_a_score_token_must_be_one_token(tiny_model_dir, make_engine):
    with pytest.raises(ValueError, match="not one"):
        make_engine(tiny_model_dir("qwen3"), score_tokens="The,definitely-yes-indeed")
