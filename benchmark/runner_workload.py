"""Deterministic synthetic workload: prompts, output lengths and Poisson arrival gaps.

Everything is derived from explicit seeds so two runs with the same flags send byte-identical
requests, which is what makes results comparable across servers and commits.
"""

import random
from dataclasses import dataclass

_WORDS = (
    "river",
    "mountain",
    "signal",
    "harbor",
    "lantern",
    "orbit",
    "meadow",
    "copper",
    "canyon",
    "whisper",
    "garden",
    "engine",
    "silver",
    "thunder",
    "forest",
    "planet",
    "valley",
    "marble",
    "ember",
    "glacier",
    "compass",
    "falcon",
    "velvet",
    "harvest",
    "beacon",
    "crystal",
    "prairie",
    "summit",
    "tunnel",
    "anchor",
    "meteor",
    "willow",
    "quartz",
    "island",
    "shadow",
    "rhythm",
    "puzzle",
    "galaxy",
    "bamboo",
    "canvas",
    "desert",
    "ripple",
    "saddle",
    "timber",
    "voyage",
    "kernel",
    "lattice",
    "prism",
)


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: its index (unique within a run), prompt and output length."""

    index: int
    prompt: str
    output_len: int


def make_prompt(index: int, num_words: int, seed: int) -> str:
    """A readable pseudo-random sentence; the leading index makes every prompt distinct."""
    rng = random.Random(f"{seed}:{index}")
    words = [rng.choice(_WORDS) for _ in range(max(num_words - 2, 1))]
    return f"Request {index}: " + " ".join(words)


def make_output_lens(count: int, low: int, high: int, seed: int) -> list[int]:
    """Output lengths drawn uniformly from [low, high] (inclusive)."""
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def make_requests(
    count: int, prompt_len: int, out_low: int, out_high: int, prompt_seed: int, out_seed: int
) -> list[RequestSpec]:
    lens = make_output_lens(count, out_low, out_high, out_seed)
    return [RequestSpec(i, make_prompt(i, prompt_len, prompt_seed), n) for i, n in enumerate(lens)]


def poisson_gaps(count: int, rate: float, seed: int) -> list[float]:
    """Inter-arrival gaps in seconds for a Poisson process at `rate` req/s (inf = no gaps)."""
    if rate == float("inf"):
        return [0.0] * count
    rng = random.Random(seed)
    return [rng.expovariate(rate) for _ in range(count)]
