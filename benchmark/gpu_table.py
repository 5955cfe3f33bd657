"""The GPU throughput table of ``scripts/gpu_check.sh`` (see docs/gpu.rst).

    python3 -m benchmark.gpu_table            # needs CUDA

A random model with the built-in model's shape (SmolLM2-135M), bf16, prompts of 32 tokens,
128 output tokens each (ignore_eos), output tokens per second after one warm-up batch:

- mstar offline (``LLMEngine.step`` in a loop) at batch 1, 32 and 256;
- transformers ``generate`` at the same batch sizes (the whole batch at once);
- the worker's overlapped step loop versus a serial one (MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=0) at
  batch 32 and 256, driven in-process through a queue instead of the zmq sockets.
"""

from __future__ import annotations

import queue
import tempfile
import threading
import time

import torch

BATCHES = (1, 32, 256)
LOOP_BATCHES = (32, 256)
PROMPT_LEN, OUTPUT_LEN = 32, 128


def make_model() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         architectures=["LlamaForCausalLM"])
    path = tempfile.mkdtemp()
    LlamaForCausalLM(config).save_pretrained(path)
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<eos>": 1}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>").save_pretrained(path)
    return path


def prompts(batch: int, tag: int = 0) -> list[list[int]]:
    return [[2 + (i * 7 + j + tag) % 40000 for j in range(PROMPT_LEN)] for i in range(batch)]


def settings(path: str, **knobs):
    from mstar.settings import WorkerSettings

    return WorkerSettings(model=path, device="cuda", dtype="bfloat16", num_kv_blocks=4096, **knobs)


def mstar_offline(engine, batch: int) -> tuple[float, dict]:
    """tok/s and the generated ids per request."""
    from mstar.engine.request.sampling_params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True)
    result = 0.0, {}
    for warm in (True, False):
        ids: dict[str, list[int]] = {}
        for i, prompt in enumerate(prompts(4 if warm else batch)):
            engine.add_request(f"{warm}-{batch}-{i}", prompt, params)
        start = time.perf_counter()
        while engine.has_unfinished_requests():
            for out in engine.step():
                ids.setdefault(out.request_id, []).extend(out.new_token_ids)
        result = sum(map(len, ids.values())) / (time.perf_counter() - start), ids
    return result


def transformers_generate(path: str, batch: int) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    rate = 0.0
    for n in (4, batch):
        input_ids = torch.tensor(prompts(n), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                 max_new_tokens=OUTPUT_LEN, min_new_tokens=OUTPUT_LEN, pad_token_id=0)
        torch.cuda.synchronize()
        rate = (out.shape[1] - PROMPT_LEN) * n / (time.perf_counter() - start)
    return rate


class QueueChannel:
    """The worker's channel, in-process: commands from a queue, outputs counted."""

    def __init__(self) -> None:
        self.inbox: queue.Queue = queue.Queue()
        self.tokens = 0
        self.done: set[str] = set()

    def receive(self, timeout_ms: int):
        msgs = []
        try:
            msgs.append(self.inbox.get(timeout=timeout_ms / 1000) if timeout_ms else
                        self.inbox.get_nowait())
        except queue.Empty:
            return []
        while not self.inbox.empty():
            msgs.append(self.inbox.get_nowait())
        return msgs

    def send_to_api(self, msg) -> None:
        from mstar.ipc import messages as m

        if isinstance(msg, m.RequestFailed):
            raise RuntimeError(f"{msg.request_id} failed: {msg.message}")
        if isinstance(msg, m.Outputs):
            self.tokens += sum(len(o.new_token_ids) for o in msg.outputs)
            self.done.update(o.request_id for o in msg.outputs if o.finished)

    def admit_model(self, vocab_size: int, max_model_len: int) -> None: ...

    def send_to_conductor(self, msg) -> None: ...

    def close(self) -> None: ...


def worker_loop(path: str, cap: int | None) -> dict[int, float]:
    """tok/s of the worker's step loop per batch size; cap 0 = serial, None = the default cap."""
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.ipc import messages as m
    from mstar.worker.worker import Worker

    knobs = {} if cap is None else {"max_consecutive_spec_steps": cap}
    channel = QueueChannel()
    worker = Worker(settings(path, **knobs), 0, channel)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    params = SamplingParams(temperature=0, max_tokens=OUTPUT_LEN, ignore_eos=True)
    rates = {}
    for batch in (4, *LOOP_BATCHES):
        ids = [f"{batch}-{i}" for i in range(batch)]
        channel.tokens = 0
        start = time.perf_counter()
        for rid, prompt in zip(ids, prompts(batch), strict=True):
            channel.inbox.put(m.AddRequest(rid, prompt, params))
        while not set(ids) <= channel.done:
            time.sleep(0.001)
        rates[batch] = channel.tokens / (time.perf_counter() - start)
    channel.inbox.put(m.Shutdown("benchmark done"))
    thread.join(60)
    return rates


def main() -> None:
    from mstar.engine.llm_engine import LLMEngine

    path = make_model()
    rows = []
    engine = LLMEngine(settings(path))
    for batch in BATCHES:
        rate, _ = mstar_offline(engine, batch)
        rows.append(("mstar offline", batch, rate))
    del engine
    torch.cuda.empty_cache()
    for batch in BATCHES:
        rows.append(("transformers generate", batch, transformers_generate(path, batch)))
    for cap, label in ((None, "worker loop, overlap on"), (0, "worker loop, cap 0 (serial)")):
        rows += [(label, batch, rate) for batch, rate in worker_loop(path, cap).items()
                 if batch in LOOP_BATCHES]
    print(f"\n{'configuration':34} {'batch':>6} {'tok/s':>10}")
    for label, batch, rate in rows:
        print(f"{label:34} {batch:>6} {rate:>10,.0f}")


if __name__ == "__main__":
    main()
