"""Speculative decoding on the built-in model (CPU): none vs ngram vs draft, one run, same settings.

Workloads: input-grounded (repeat a passage with one change, edit code given in the prompt),
where prompt lookup finds the continuation in the prompt, and open-ended chat, where it mostly
does not (the verify gate then holds drafts back where they do not pay, and the acceptance floor
turns speculation off for the request). Output tokens per second at concurrency 1 (requests one
after another) and 8 (all at once; with ``--clients``, 8 clients that send 24 requests, each its
next one when its last one finished), greedy, the drafts the gate held back, and whether the
outputs are identical token for token. The engines take turns request group by request group,
in alternating order, so a shared machine's changing load hits them alike. ``draft`` uses
``--draft-model`` (default: the built-in model itself, which checks correctness and acceptance
but cannot be faster than the target; pass a smaller same-tokenizer model for speed, or a larger
``--model`` target).

    python -m benchmark.speculative [--max-tokens 128] [--threads 0] [--workload grounded|chat]
        [--concurrency 1 8] [--rounds 1] [--clients] [--control] [--methods ngram draft]
        [--quantization none|int8|q4] [--model builtin]
        [--draft-model builtin]
"""

from __future__ import annotations

import argparse
import time

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings
from mstar.settings.schema import BUILTIN_MODEL

CONTROL = "none (control)"  # --control: a second engine without speculation

PASSAGE = (
    "The paged KV cache stores the keys and values of every request in fixed-size blocks. A "
    "block table maps each request's positions to blocks, so requests of different lengths share "
    "one pool of memory without fragmentation. When the pool runs out, the newest request is "
    "preempted: its blocks are freed and it is recomputed later from its prompt and outputs.")
CODE = '''def mean(values):
    total = 0
    for value in values:
        total = total + value
    return total / len(values)


def variance(values):
    centre = mean(values)
    total = 0
    for value in values:
        total = total + (value - centre) ** 2
    return total / len(values)
'''
GROUNDED = [
    "Repeat the following text exactly, but write 'memory pool' instead of 'pool':\n\n" + PASSAGE,
    "Rename the variable `total` to `acc` in this code and return the whole code:\n\n" + CODE,
    "Copy this paragraph word for word, changing only 'newest' to 'youngest':\n\n" + PASSAGE,
    "Add type hints (list[float] -> float) to these functions and return the whole code:\n\n"
    + CODE,
]
CHAT = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What are three good habits for staying healthy? Explain each briefly.",
    "Describe your ideal weekend in a few sentences.",
    "Give me some ideas for a birthday party for a ten-year-old.",
]


def prompts(engine: LLMEngine, texts: list[str], count: int) -> list[list[int]]:
    tok = engine.tokenizer
    chats = [[{"role": "user", "content": texts[i % len(texts)]}] for i in range(count)]
    texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def run_clients(engine: LLMEngine, batch: list[list[int]], ids: range, max_tokens: int,
                clients: int) -> tuple[float, dict[int, list[int]]]:
    """``clients`` clients send the requests ``batch[i]`` for ``i`` in ``ids``, each its next one
    as soon as its last one finished: (seconds, each request's tokens)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    waiting = list(ids)
    outputs: dict[str, list[int]] = {}

    def send() -> None:
        i = waiting.pop(0)
        engine.add_request(str(i), batch[i], params)
        outputs[str(i)] = []

    start = time.perf_counter()
    for _ in range(min(clients, len(waiting))):
        send()
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs[out.request_id] += out.new_token_ids
            if out.finished and waiting:
                send()
    return time.perf_counter() - start, {int(i): t for i, t in outputs.items()}


def compare(engines: dict[str, LLMEngine], batch: list[list[int]], max_tokens: int,
            concurrency: int, rounds: int, clients: bool
            ) -> dict[str, tuple[float, list[list[int]]]]:
    """Per engine: output tokens per second over ``rounds`` runs of the batch, and each request's
    tokens. A run is groups of ``concurrency`` requests sent at once, one group after another,
    or with ``clients``, the whole batch sent by ``concurrency`` clients. The engines take turns
    run by run (group by group), the order flipped every time, so a machine's drift hits both
    alike."""
    seconds = dict.fromkeys(engines, 0.0)
    tokens: dict[str, dict[int, list[int]]] = {name: {} for name in engines}
    width = len(batch) if clients else concurrency
    groups = [range(first, min(first + width, len(batch)))
              for first in range(0, len(batch), width)] * rounds
    for g, ids in enumerate(groups):
        for name in (list(engines) if g % 2 == 0 else list(engines)[::-1]):
            took, got = run_clients(engines[name], batch, ids, max_tokens, concurrency)
            seconds[name] += took
            tokens[name].update(got)
    out = {}
    for name in engines:
        ordered = [tokens[name][i] for i in range(len(batch))]
        out[name] = (rounds * sum(map(len, ordered)) / seconds[name], ordered)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--workload", choices=["all", "grounded", "chat"], default="all")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of each batch per engine, summed (a c=8 batch is one group)")
    parser.add_argument("--clients", action="store_true",
                        help="c > 1: c clients send 3c requests, each its next one when its last "
                        "finished (default: c requests at once, to the last one's end)")
    parser.add_argument("--methods", nargs="+", choices=["ngram", "draft"],
                        default=["ngram", "draft"])
    parser.add_argument("--control", action="store_true",
                        help="a second none engine, against the first: the ratio two like engines "
                        "give on this machine (the spread between engines, which stays with each)")
    parser.add_argument("--quantization", choices=["none", "int8", "q4"], default="none",
                        help="every engine's (the draft model's too)")
    parser.add_argument("--model", default=BUILTIN_MODEL, help="the target model")
    parser.add_argument("--draft-model", default=BUILTIN_MODEL,
                        help="the draft method's model (the target's tokenizer)")
    args = parser.parse_args()
    common = {"model": args.model, "dtype": "float32", "quantization": args.quantization,
              "max_model_len": 2048,
              "num_kv_blocks": 512, "torch_num_threads": args.threads, "log_level": "warning",
              "speculative_draft_model": args.draft_model}
    engines = {method: LLMEngine(WorkerSettings(speculative_method=method, **common))
               for method in ["none", *args.methods]}
    if args.control:
        engines[CONTROL] = LLMEngine(WorkerSettings(speculative_method="none", **common))
    print("| workload | c | method | tok/s | none tok/s | speed-up | acceptance | held back "
          "| identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    workloads = {"grounded": ("input-grounded", GROUNDED), "chat": ("open-ended chat", CHAT)}
    chosen = workloads.values() if args.workload == "all" else [workloads[args.workload]]
    for name, texts in chosen:
        for concurrency in args.concurrency:
            count = 4 if concurrency == 1 else 3 * concurrency if args.clients else concurrency
            batch = prompts(engines["none"], texts, count)
            stats = {m: engines[m].speculation.stats for m in args.methods}
            before = {m: (s.proposed, s.accepted, s.held) for m, s in stats.items()}
            results = compare(engines, batch, args.max_tokens, concurrency, args.rounds,
                              args.clients and concurrency > 1)
            base, want = results["none"]
            for method in args.methods:
                fast, got = results[method]
                proposed = stats[method].proposed - before[method][0]
                accepted = stats[method].accepted - before[method][1]
                rate = accepted / proposed if proposed else 0.0
                held = stats[method].held - before[method][2]
                print(f"| {name} | {concurrency} | {method} | {fast:.1f} | {base:.1f} | "
                      f"{fast / base:.2f}x | {rate:.0%} of {proposed} | {held} | {got == want} |",
                      flush=True)
            if args.control:
                same, got = results[CONTROL]
                print(f"| {name} | {concurrency} | {CONTROL} | {same:.1f} | {base:.1f} | "
                      f"{same / base:.2f}x | - | - | {got == want} |", flush=True)
    for engine in engines.values():
        engine.shutdown()


if __name__ == "__main__":
    main()
