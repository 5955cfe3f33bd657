"""Image requests through mstar.LLM on a vision-language model directory, in one run:

    .venv/bin/python -m benchmark.multimodal --model DIR [--requests 16] [--max-tokens 32]
        [--knob NAME=VALUE ...]

DIR: a user's VLM (SmolVLM, Idefics3, LLaVA) or a saved tiny random one (test/vlm_helpers.py's
``make_tiny_vlm``). Prints:

- image-request throughput: --requests requests, each with its own random image;
- a mixed batch (half image, half text-only requests) against a text-only batch of the same size;
- the same image twice: the second request's latency against the first's (the encoder cache hit;
  prefix caching is off so that only the encoder cache can help), with the encoder's hit and
  miss counts and seconds.

Greedy, ignore_eos, every request max_tokens long.
"""

from __future__ import annotations

import argparse
import base64
import io
import time

import numpy as np

QUESTION = "Describe this picture in detail."
TEXT = "Write a short story about a small robot who learns to paint."


def image_url(seed: int, size: int = 512) -> str:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def image_chat(seed: int, text: str = QUESTION) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url(seed)}},
                                         {"type": "text", "text": text}]}]


def text_chat() -> list[dict]:
    return [{"role": "user", "content": TEXT}]


def timed(llm, conversations, max_tokens: int) -> tuple[float, int]:
    from mstar import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    results = llm.chat(conversations, params)
    return time.perf_counter() - start, sum(len(r.token_ids) for r in results)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    from mstar import LLM

    knobs = dict(k.split("=", 1) for k in args.knob)
    llm = LLM(args.model, enable_prefix_caching=False,
              **{k.lower().removeprefix("mstar_"): v for k, v in knobs.items()})
    n, m = args.requests, args.max_tokens
    timed(llm, [image_chat(10_000)], m)  # warm-up: lazy kernels, processor load

    seconds, tokens = timed(llm, [image_chat(i) for i in range(n)], m)
    print(f"image requests: {n / seconds:.2f} req/s, {tokens / seconds:.1f} output tok/s")

    mixed = [image_chat(n + i) if i % 2 else text_chat() for i in range(n)]
    mixed_s, mixed_tokens = timed(llm, mixed, m)
    text_s, text_tokens = timed(llm, [text_chat() for _ in range(n)], m)
    print(f"mixed text+image batch: {mixed_tokens / mixed_s:.1f} tok/s; text-only batch: "
          f"{text_tokens / text_s:.1f} tok/s")

    before = llm.engine.stats()
    first_s, _ = timed(llm, [image_chat(99_999)], m)
    again_s, _ = timed(llm, [image_chat(99_999, "And the colours?")], m)
    after = llm.engine.stats()
    print(f"same image twice: first {first_s * 1000:.0f} ms, second {again_s * 1000:.0f} ms; "
          f"encoder cache hits +{after.encoder_cache_hits - before.encoder_cache_hits}, "
          f"misses +{after.encoder_cache_misses - before.encoder_cache_misses}, "
          f"encoder {after.encoder_seconds - before.encoder_seconds:.3f} s")


if __name__ == "__main__":
    main()
