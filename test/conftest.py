"""Shared fixtures: a tokenizer built in code and tiny random-weight models per family."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The fake OpenAI server's fixtures (server, fake) for the benchmark runner's tests; how
# pytest-xdist shares the work out (scripts/test.sh runs two workers); the served tiny CSM the
# speech route's tests share (speech_server).
pytest_plugins = ["fake_openai_server", "xdist_groups", "speech_server"]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Continuous batching keeps the accelerator busy while requests come and go.",
    "def add(a, b):\n    return a + b\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20.",
    "Hello world! How are you today? I am fine, thank you.",
]
_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", choices=("cpu", "cuda"),
                     help="device the engine tests run mstar on (the transformers oracle stays on CPU)")
    parser.addoption("--builtin-dtype", default="float32", choices=("float32", "bfloat16"),
                     help="MSTAR_DTYPE of the shared built-in model server (float32: the same "
                          "greedy text on every CPU, whatever auto would pick)")


def pytest_configure(config):
    # Without a GPU the Triton kernels run in Triton's interpreter. Triton decides that when a
    # function is decorated, and torch.compile imports triton early, so set it before collection.
    if config.getoption("--device") == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def device(request) -> str:
    return request.config.getoption("--device")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """Byte-level BPE trained on a few sentences; eos/bos and a ChatML-like chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 3, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=_CHAT_TEMPLATE,
    )


def _config(family: str, vocab_size: int, eos: int, bos: int):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-6, eos_token_id=eos, bos_token_id=bos, pad_token_id=bos,
        initializer_range=0.1,
    )
    if family == "llama":
        return LlamaConfig(**common, rope_theta=10000.0, tie_word_embeddings=False)
    if family == "qwen2":
        return Qwen2Config(**common, rope_theta=1000000.0, tie_word_embeddings=True)
    if family == "qwen3":
        return Qwen3Config(**common, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True)
    return _family_config(family, common)


# Sliding windows are smaller than prompt + generation, so the window changes the outputs.
_WINDOW = 8


def _family_config(family: str, common: dict):
    """Tiny configs of the families beyond Llama/Qwen2/Qwen3 (see test_parity_families)."""
    import transformers as tf

    if family == "mistral":
        return tf.MistralConfig(**common, sliding_window=_WINDOW, tie_word_embeddings=False)
    if family == "gemma3":
        return tf.Gemma3TextConfig(
            **common, head_dim=16, query_pre_attn_scalar=24, sliding_window=_WINDOW,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            final_logit_softcapping=30.0, tie_word_embeddings=True,
        )
    if family == "phi3":
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
        return tf.Phi3Config(**common, rope_parameters=rope, tie_word_embeddings=False)
    if family == "phi3_longrope":  # 512 / 128: an attention factor of sqrt(1 + ln 4 / ln 128)
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "short_factor": [1.0, 1.05, 1.1, 1.2], "long_factor": [1.5, 2.0, 4.0, 8.0]}
        return tf.Phi3Config(**common, rope_parameters=rope, original_max_position_embeddings=128,
                             tie_word_embeddings=False)
    if family == "olmo2":
        return tf.Olmo2Config(**common, tie_word_embeddings=False)
    if family == "smollm3":
        return tf.SmolLM3Config(**common, no_rope_layers=[1, 0, 1], tie_word_embeddings=True)
    if family == "qwen3_moe":
        return tf.Qwen3MoeConfig(
            **common, head_dim=16, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=[2],
            tie_word_embeddings=False,
        )
    if family == "qwen3_5":  # Gated DeltaNet layers, then a gated full-attention layer
        return tf.Qwen3_5TextConfig(
            **common | {"num_hidden_layers": 4}, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "full_attention"], tie_word_embeddings=False,
        )
    raise ValueError(family)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer):
    """Factory: ``tiny_model_dir("llama"|"qwen2"|"qwen3") -> Path`` of an HF-format dir (cached)."""
    import torch
    from transformers import AutoModelForCausalLM

    made: dict[str, Path] = {}

    def make(family: str) -> Path:
        if family not in made:
            config = _config(family, len(tiny_tokenizer), tiny_tokenizer.eos_token_id,
                             tiny_tokenizer.bos_token_id)
            torch.manual_seed(1234)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            path = tmp_path_factory.mktemp(f"tiny-{family}")
            model.save_pretrained(path)
            tiny_tokenizer.save_pretrained(path)
            made[family] = path
        return made[family]

    return make


@pytest.fixture(scope="session")
def omni_thinker_dir(tmp_path_factory, tiny_tokenizer):
    """The chain and placement tests' tiny Qwen3-Omni (``omni_helpers.save_tiny_thinker``), saved
    once; tests read it, never write it."""
    from omni_helpers import save_tiny_thinker

    return save_tiny_thinker(tmp_path_factory.mktemp("omni-thinker-model"), tiny_tokenizer)


@pytest.fixture(scope="session")
def omni_speaker(omni_thinker_dir):
    """transformers' whole Qwen3-Omni on ``omni_thinker_dir``: the chain's oracle."""
    from omni_chain_runs import omni_oracle

    return omni_oracle(omni_thinker_dir)


LONG_POSITIONS = 16384


@pytest.fixture(scope="session")
def long_model_dir(tmp_path_factory, tiny_tokenizer):
    """A random Llama as small as the tiny ones but with 16384 positions: served work that
    cannot end by itself within a test's patience on any machine (the tiny models' 512
    positions allow ~500 steps, which a fast machine runs in well under a second)."""
    from model_dirs import save_random_llama

    return save_random_llama(tmp_path_factory.mktemp("long-llama"), tiny_tokenizer,
                             hidden_size=64, intermediate_size=128, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=LONG_POSITIONS)


def transformers_greedy(model_dir: Path, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """The oracle: transformers greedy generate, fp32 on CPU, each prompt alone (no padding)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    outs = []
    for ids in prompts:
        with torch.inference_mode():
            gen = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False, max_new_tokens=max_new, pad_token_id=0,
            )
        outs.append(gen[0, len(ids):].tolist())
    return outs


@pytest.fixture(scope="session")
def greedy_reference():
    return transformers_greedy


@pytest.fixture(scope="session")
def builtin_cache_dir() -> Path:
    """Where the built-in model is converted once and reused (the settings default)."""
    from mstar.settings import WorkerSettings

    return WorkerSettings().cache_dir


def _serve_builtin(cache_dir: Path, log_dir: Path, dtype: str):
    from serve_helpers import running_server

    from mstar.settings.schema import BUILTIN_MODEL

    yield from running_server(Path(BUILTIN_MODEL), log_dir / "s.log",
                              {"MSTAR_CACHE_DIR": str(cache_dir), "MSTAR_MAX_MODEL_LEN": "2048",
                               "MSTAR_NUM_KV_BLOCKS": "256", "MSTAR_DTYPE": dtype})


@pytest.fixture(scope="session")
def builtin_server(builtin_cache_dir, tmp_path_factory, request):
    """One `mstar serve` of the built-in model for the whole session (the tool-calling and
    structured-output tests with the official client share it: a start costs ~16 s)."""
    yield from _serve_builtin(builtin_cache_dir, tmp_path_factory.mktemp("builtin"),
                              request.config.getoption("--builtin-dtype"))


@pytest.fixture(scope="session")
def builtin_server_bf16(builtin_cache_dir, tmp_path_factory, request):
    """The built-in model served in bfloat16 (what MSTAR_DTYPE=auto picks on CPUs with avx512_bf16
    or AMX; emulated, and slower, elsewhere), for the API tests that must hold in both dtypes."""
    if request.config.getoption("--builtin-dtype") == "bfloat16":
        yield request.getfixturevalue("builtin_server")
        return
    yield from _serve_builtin(builtin_cache_dir, tmp_path_factory.mktemp("builtin-bf16"),
                              "bfloat16")


@pytest.fixture(scope="session")
def api_server(tiny_model_dir, tmp_path_factory):
    """One `mstar serve` of the tiny Llama for the HTTP API tests (test_serve_api,
    test_openai_client), with every knob they need at once: an API key, a cap of one request in
    flight, a 1 MiB body limit, unknown request fields rejected, the aliases m, tiny-llama and
    gpt-4o-mini, and three problematic environment settings whose warnings must be logged before
    the model loads."""
    from serve_helpers import API_KEY, running_server

    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("api") / "s.log", {
        "MSTAR_API_KEY": API_KEY,
        "MSTAR_MAX_CONCURRENT_REQUESTS": "1",
        "MSTAR_MAX_BODY_MB": "1",
        "MSTAR_UNKNOWN_REQUEST_FIELDS": "reject",
        "MSTAR_SERVED_MODEL_NAMES": "m,tiny-llama,gpt-4o-mini",
        "MSTAR_LAUNCH_WAIT_MS": "5ms",
        "MSTAR_MAX_CONSECUTIVE_SPEC_STEPS": "1e3",
        "MSTAR_LAUNCH_WAIT": "5",
    })


@pytest.fixture()
def api_client(api_server):
    """The official openai client on the shared API server, with its key and no retries."""
    import openai
    from serve_helpers import API_KEY

    return openai.OpenAI(base_url=api_server.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=30)


@pytest.fixture(scope="session")
def make_engine(device):
    """Factory: ``make_engine(model_dir, **settings_overrides) -> LLMEngine`` (fp32, --device).

    Its schedule is the same on every machine: the prefill share beside decodes (on by default
    on CPU) pays a prompt's chunks from measured step times, so a test that counts preemptions
    could see none on a faster or busier machine; a test of the share asks for it."""
    from mstar.engine.llm_engine import LLMEngine
    from mstar.settings import WorkerSettings

    def make(model_dir: Path, **overrides):
        overrides.setdefault("device", device)
        overrides.setdefault("dtype", "float32")
        overrides.setdefault("prefill_share_beside_decodes", 0.0)
        return LLMEngine(WorkerSettings(model=str(model_dir), **overrides))

    return make


def run_engine(engine, requests: dict, max_steps: int = 10_000) -> dict:
    """Feed ``{request_id: (prompt_ids, params)}`` and step until done; returns outputs per id.

    Requests added earlier and still running are stepped to completion too.
    """
    def empty():
        return {"token_ids": [], "text": "", "finish_reason": None, "cached_tokens": 0}

    from mstar.output.processor import RequestText, ends_in_engine

    results = {rid: empty() for rid in requests}
    texts = getattr(engine, "_test_texts", {})  # requests added by earlier calls keep their text
    engine._test_texts = texts
    for rid, seq in engine.seqs.items():  # added by the test itself
        if rid not in texts:
            texts[rid] = RequestText(engine.tokenizer, seq.token_ids[:seq.num_prompt_tokens],
                                     seq.params)
    for rid, (prompt_ids, params) in requests.items():
        engine.add_request(rid, prompt_ids, params)
        texts[rid] = RequestText(engine.tokenizer, prompt_ids, params)
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        for raw in engine.step():
            out = texts[raw.request_id].to_text(raw)
            if out is None:
                continue
            if ends_in_engine(out, raw):
                engine.abort_request(raw.request_id)
            r = results.setdefault(out.request_id, empty())
            r["token_ids"] += out.new_token_ids
            r["text"] += out.new_text
            r["cached_tokens"] = out.num_cached_tokens
            if out.finished:
                r["finish_reason"] = out.finish_reason
                r["embedding"] = out.embedding
    else:
        raise AssertionError("engine did not finish")
    return results


@pytest.fixture(scope="session")
def best_level(builtin_cache_dir) -> int:
    """The SIMD level the native CPU kernels run at on this machine (builds them once)."""
    import torch

    from mstar.kernels.cpu.build import native_kernels

    if not native_kernels(builtin_cache_dir):
        pytest.fail("the C++ kernels did not build; see the cpu_kernels_unavailable warning")
    return torch.ops.mstar_cpu.cpu_level()


@pytest.fixture(scope="session")
def cpu_features(best_level):
    """The instruction-set features the native CPU kernels found on this CPU (a ``Feature`` set)."""
    import torch

    from mstar.kernels.cpu.levels import Feature

    return Feature(torch.ops.mstar_cpu.cpu_features())


@pytest.fixture(scope="session")
def run():
    return run_engine


def greedy_tokens(engine, prompts: list[list[int]], max_tokens: int, **params) -> list[list[int]]:
    """Every prompt greedy in one batch (ids r0, r1, ...); their output tokens in prompt order."""
    from mstar.engine.request.sampling_params import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, **params)
    out = run_engine(engine, {f"r{i}": (p, sampling) for i, p in enumerate(prompts)})
    return [out[f"r{i}"]["token_ids"] for i in range(len(prompts))]


@pytest.fixture(scope="session")
def greedy():
    return greedy_tokens
