"""Speculative decoding with what depends on the outputs before each position: penalties,
min_tokens and a structured-output grammar give the same greedy tokens as without speculation,
while drafts get proposed and accepted for them."""

from __future__ import annotations

import json

import jsonschema
import pytest

from mstar.engine.request.sampling_params import SamplingParams, StructuredOutput

# speculative_gate=False: every proposed draft is verified, whatever this machine's step timings
# (the gate itself: test_speculative_gate.py).
NGRAM = {"speculative_method": "ngram", "speculative_gate": False, "num_speculative_tokens": 4,
         "speculative_min_acceptance": 0.0, "kv_block_size": 4, "num_kv_blocks": 256}
TEXTS = ["one two three four five six seven. one two three four five six seven. one two three",
         "The quick brown fox jumps over the lazy dog. The quick brown fox", "Hello"]
RECORD = {"type": "object", "required": ["id", "tags", "name"], "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 99},
    "tags": {"type": "array", "maxItems": 4, "items": {"enum": ["a", "bb", "ccc"]}},
    "name": {"type": "string", "maxLength": 6}}}


def _outputs(make_engine, run, model_dir, requests, **settings) -> tuple[dict, object]:
    engine = make_engine(model_dir, **settings)
    results = run(engine, requests)
    return {rid: (r["token_ids"], r["finish_reason"]) for rid, r in results.items()}, engine


@pytest.mark.parametrize("params", [
    {"repetition_penalty": 1.3},
    {"presence_penalty": 0.2, "frequency_penalty": 0.1},
    {"min_tokens": 20, "repetition_penalty": 1.1},
], ids=["repetition", "presence_frequency", "min_tokens"])
def test_penalised_requests_speculate_to_the_same_tokens(params, tiny_model_dir, tiny_tokenizer,
                                                         make_engine, run):
    requests = {f"r{i}": (tiny_tokenizer.encode(t),
                          SamplingParams(temperature=0.0, max_tokens=32, **params))
                for i, t in enumerate(TEXTS)}
    model_dir = tiny_model_dir("llama")
    plain, _ = _outputs(make_engine, run, model_dir, requests, kv_block_size=4,
                        num_kv_blocks=256)
    spec, engine = _outputs(make_engine, run, model_dir, requests, **NGRAM)
    assert spec == plain
    assert engine.speculation.stats.accepted > 0


@pytest.mark.parametrize("family", ["llama", "qwen3_5"])
def test_json_schema_requests_speculate_to_the_same_tokens(family, tiny_model_dir,
                                                           tiny_tokenizer, make_engine, run):
    """The grammar checks each draft and rolls back: the outputs match, parse and obey."""
    so = StructuredOutput(kind="json_schema", spec=json.dumps(RECORD))
    requests = {f"c{i}": (tiny_tokenizer.encode(t), SamplingParams(
        temperature=0.0, max_tokens=80, structured_output=so, frequency_penalty=0.3))
        for i, t in enumerate(TEXTS)}
    requests["free"] = (tiny_tokenizer.encode(TEXTS[0]), SamplingParams(temperature=0.0,
                                                                        max_tokens=20))
    model_dir = tiny_model_dir(family)
    plain, _ = _outputs(make_engine, run, model_dir, requests, kv_block_size=4,
                        num_kv_blocks=256)
    engine = make_engine(model_dir, **NGRAM)
    results = run(engine, requests)
    assert {rid: (r["token_ids"], r["finish_reason"]) for rid, r in results.items()} == plain
    stats = engine.speculation.stats
    assert stats.accepted > 0 and stats.proposed > stats.accepted
    for rid, r in results.items():
        if rid != "free":
            assert r["finish_reason"] == "stop", r
            jsonschema.validate(json.loads(r["text"]), RECORD)
