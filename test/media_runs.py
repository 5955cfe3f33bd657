"""What the engine tests of media models (vision, audio) share: requests with their built prompts
run to completion under fresh ids, a request's tokens and cached prefix, and the KV size that
forces a preemption."""

from __future__ import annotations

import itertools

from mstar.engine.request.sampling_params import SamplingParams

_CALLS = itertools.count()


def run_built(engine, built: dict, max_new: int) -> dict[str, list[int]]:
    """``built``: {request id: (prompt ids, media parts)} -> {request id: greedy token ids}."""
    from conftest import run_engine

    params = SamplingParams(temperature=0.0, max_tokens=max_new)
    tag = f"#{next(_CALLS)}"  # request ids are never reused within one engine
    for rid, (prompt, parts) in built.items():
        engine.add_request(rid + tag, prompt, params, tuple(parts))
    results = run_engine(engine, {})
    return {rid: results[rid + tag]["token_ids"] for rid in built}


def run_cached(engine, prompt: list[int], parts, max_new: int) -> tuple[list[int], int]:
    """One more request: its greedy tokens and how many prompt tokens the prefix cache held."""
    from conftest import run_engine

    rid = f"cached#{next(_CALLS)}"
    engine.add_request(rid, prompt, SamplingParams(temperature=0, max_tokens=max_new),
                       tuple(parts))
    out = run_engine(engine, {})[rid]
    return out["token_ids"], out["cached_tokens"]


def preempting_blocks(lens: dict[str, int], max_new: int, block: int = 4) -> int:
    """KV blocks that admit "one" and "other" together but cannot grow both to full length,
    while the longest request still fits alone."""
    return max(2 * -(-lens["one"] // block) + 1, -(-(max(lens.values()) + max_new) // block))


def family_factory(make_dir, load_processor, prompt_text, oracle, subject: str, media,
                   two: list, max_new: int):
    """A module fixture's body: family -> (model dir, processor, requests, references), made
    once per family. The requests: "one" and "other" (the same text about the ``subject``, with
    ``media(1)`` and ``media(2)``), "two" (the parts ``two``) and "text" (no part); the
    references are transformers' greedy tokens (``oracle``)."""
    made = {}

    def get(family: str):
        if family not in made:
            path = make_dir(family)
            processor = load_processor(path)
            ask = f"Describe the {subject}."
            requests = {
                "one": (prompt_text(processor, ask, 1), [media(1)]),
                "other": (prompt_text(processor, ask, 1), [media(2)]),
                "two": (prompt_text(processor, "Compare them.", 2), two),
                "text": (prompt_text(processor, "Paris is the capital of France.", 0), []),
            }
            refs = {rid: oracle(path, text, parts, max_new)
                    for rid, (text, parts) in requests.items()}
            made[family] = path, processor, requests, refs
        return made[family]

    return get
