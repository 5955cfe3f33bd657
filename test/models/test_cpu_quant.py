"""Weight-only quantization on CPU: kernels, layouts, GGUF loading, and quantized engines."""

from __future__ import annotations

import os
from types import SimpleNamespace

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.loading import gguf_loader
from mstar.models.quant.formats import (
    Int8Weight,
    dequantize,
    dequantize_q4,
    quantize_int8,
    quantize_q4,
)
from mstar.models.quant.linear import QuantLinear


def _weights(n: int, k: int) -> torch.Tensor:
    torch.manual_seed(n * 1000 + k)
    return torch.randn(n, k) * torch.rand(n, 1)  # rows of different magnitude


def test_q4_rounding_error_is_at_most_half_a_step():
    w = _weights(16, 256)
    q = quantize_q4(w)
    blocks = w.view(16, -1, 32)
    step = (blocks.amax(-1) - blocks.amin(-1)) / 15
    err = (dequantize_q4(q) - w).abs().view(16, -1, 32).amax(-1)
    # fp16 storage of the scale and minimum adds a little on top of half a step
    assert (err <= step / 2 * 1.01 + 1e-3 * blocks.abs().amax(-1)).all()


def test_q4_quantizer_writes_the_bytes_ggml_writes():
    values = _weights(8, 128)
    ours = quantize_q4(values).blocks.numpy()
    assert np.array_equal(ours, gguf.quants.quantize(values.numpy(), gguf.GGMLQuantizationType.Q4_1))


def test_int8_is_per_output_channel_and_within_half_a_step():
    w = _weights(16, 256)
    q = quantize_int8(w)
    assert q.scales.shape == (16, 1)
    assert ((dequantize(q) - w).abs() <= q.scales / 2 * 1.0001).all()


@pytest.mark.parametrize("mode", ["native", "reference"])
def test_the_lm_head_returns_float32_logits_from_bf16_rows(mode, best_level):
    """``logits=True`` (the LM head install_quantized makes): float32 out, the kernel's sums as they
    are, not rounded to bf16 on the way; other layers return x's dtype."""
    w = quantize_int8(torch.randn(48, 64))
    x = torch.randn(3, 64).bfloat16()
    head, layer = QuantLinear(w, None, mode, logits=True), QuantLinear(w, None, mode)
    got = head(x)
    assert got.dtype == torch.float32 and layer(x).dtype == torch.bfloat16
    assert torch.equal(got, QuantLinear(w, None, mode)(x.float()))


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_gguf_blocks_load_into_layouts_exactly(kind):
    qtype = gguf.GGMLQuantizationType[kind]
    values = _weights(12, 128).numpy()
    blocks = gguf.quants.quantize(values, qtype)
    weight = gguf_loader._shipped(blocks, kind)
    want = torch.from_numpy(gguf.quants.dequantize(blocks, qtype).astype(np.float32))
    assert torch.equal(dequantize(weight), want)
    assert isinstance(weight, Int8Weight) == (kind == "Q8_0")


def test_gguf_tensors_are_read_once_then_from_the_cache(tmp_path, monkeypatch):
    """Opening a GGUF parses its whole vocabulary (seconds for the built-in model), so its
    tensors are kept after the first read: the next read never opens the file and returns the
    same tensors; a changed file is read again."""
    types = gguf.GGMLQuantizationType
    path = tmp_path / "m.gguf"
    values = _weights(64, 64).numpy()
    writer = gguf.GGUFWriter(path, "llama")
    for name, kind in (("blk.0.attn_q.weight", types.Q4_1), ("blk.0.ffn_down.weight", types.Q8_0),
                       ("blk.0.ffn_up.weight", types.Q5_0)):  # Q5_0: loaded dense
        writer.add_tensor(name, gguf.quants.quantize(values, kind), raw_dtype=kind)
    writer.add_tensor("blk.0.attn_norm.weight", np.linspace(0.5, 1.5, 64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    config = SimpleNamespace(num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                             hidden_size=64, head_dim=16)
    names = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
             "model.layers.0.mlp.up_proj.weight", "model.layers.0.input_layernorm.weight"}
    cache = tmp_path / "cache"
    dense, quant = gguf_loader.read_gguf(path, names, config, cache)

    def unopened(*args, **kwargs):
        raise AssertionError("the GGUF was opened again")

    monkeypatch.setattr(gguf, "GGUFReader", unopened)
    again_dense, again_quant = gguf_loader.read_gguf(path, names, config, cache)
    assert dense.keys() == again_dense.keys() == {"model.layers.0.mlp.up_proj.weight",
                                                  "model.layers.0.input_layernorm.weight"}
    assert all(torch.equal(dense[n], again_dense[n]) for n in dense)
    assert quant.keys() == again_quant.keys()
    for name, weight in quant.items():
        assert type(again_quant[name]) is type(weight)
        assert torch.equal(dequantize(again_quant[name]), dequantize(weight))
    os.utime(path, ns=(0, 0))  # a changed file: read again
    with pytest.raises(AssertionError, match="opened again"):
        gguf_loader.read_gguf(path, names, config, cache)


def test_unreadable_gguf_model_is_a_model_error(tmp_path):
    from mstar.models.loading.resolve import ModelError, resolve_model_dir
    from mstar.settings import WorkerSettings

    (tmp_path / "broken.gguf").write_bytes(b"not a gguf")
    with pytest.raises(ModelError, match=r"cannot read GGUF model .*broken\.gguf"):
        resolve_model_dir(WorkerSettings(model=str(tmp_path / "broken.gguf"), cache_dir=tmp_path))


def test_gguf_file_as_model_is_served_at_its_shipped_precision(tmp_path, run):
    from mstar.engine.llm_engine import LLMEngine
    from mstar.models.loading.builtin import builtin_gguf_path
    from mstar.settings import WorkerSettings

    engine = LLMEngine(WorkerSettings(model=str(builtin_gguf_path()), cache_dir=tmp_path,
                                      device="cpu", dtype="float32", max_model_len=256,
                                      num_kv_blocks=16))
    layer = engine.model_runner.model.model.layers[0]
    assert isinstance(layer.mlp.down_proj, QuantLinear)  # Q4_1 blocks, no float32 copy
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, tokenize=True, return_dict=False)
    answer = run(engine, {"q": (list(prompt), SamplingParams(temperature=0, max_tokens=12))})
    assert "Paris" in answer["q"]["text"]


def test_builtin_gguf_q4_weights_equal_the_fp32_conversion(builtin_cache_dir, tmp_path):
    """--quantization q4 on the built-in model reads its Q4_1 GGUF, the same weights as fp32."""
    from mstar.models.loading.builtin import ensure_builtin_model
    from mstar.models.loading.loader import load_model

    model_dir = ensure_builtin_model(builtin_cache_dir)
    cfg = AutoConfig.from_pretrained(model_dir)
    dense = load_model(model_dir, cfg, torch.device("cpu"), torch.float32, prepack=False)
    quant = load_model(model_dir, cfg, torch.device("cpu"), torch.float32, prepack=False,
                       quantization="q4", cache_dir=builtin_cache_dir)
    layer = 3
    for path in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
        got = quant.model.layers[layer].get_submodule(path)
        assert isinstance(got, QuantLinear) and got.extra_repr().split(", ")[1] == "q4"
        assert torch.equal(dequantize(got.qweight), dense.model.layers[layer].get_submodule(path).weight)
    assert torch.equal(dequantize(quant.lm_head.qweight), dense.lm_head.weight)  # Q8_0, shipped
    ids = torch.tensor([1, 500, 49151])
    assert torch.equal(quant.model.embed_tokens(ids), dense.model.embed_tokens(ids))


@pytest.mark.parametrize("mode", ["int8", "q4"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])  # untied and tied embeddings
def test_quantized_engine_matches_transformers_on_dequantized_weights(
        tiny_model_dir, make_engine, run, mode, family):
    engine = make_engine(tiny_model_dir(family), quantization=mode, num_kv_blocks=64)
    model = engine.model_runner.model
    quantized = {name: m for name, m in model.named_modules() if isinstance(m, QuantLinear)}
    assert len(quantized) == 4 * 3 + 1  # four linears per layer and the LM head
    assert quantized["lm_head"].extra_repr().split(", ")[1] == "int8"
    for module in quantized.values():  # float32 activations: the weights alone are compared
        module.mode = "exact"
    ref = AutoModelForCausalLM.from_pretrained(tiny_model_dir(family), dtype=torch.float32).eval()
    with torch.no_grad():
        for name, module in quantized.items():
            _assign_dequantized(ref, model, name, dequantize(module.qweight))
    prompts = [[5, 6, 7, 8, 9], [40, 41, 42], list(range(60, 90))]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    got = run(engine, {str(i): (p, params) for i, p in enumerate(prompts)})
    for i, p in enumerate(prompts):
        with torch.inference_mode():
            want = ref.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=int),
                                do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                pad_token_id=0)[0, len(p):].tolist()
        assert got[str(i)]["token_ids"] == want


def test_builtin_q4_greedy_tokens_equal_the_torch_reference(builtin_cache_dir, run):
    """The integer-dot kernels and their torch reference (the same int16 rounding) decode the
    same text. A prompt of the layer's ``wide_rows`` or more runs the kernels' tiles against
    the reference's float32 (bf16 tiles on avx512_bf16): the tokens still match."""
    from mstar.engine.llm_engine import LLMEngine
    from mstar.settings import WorkerSettings

    engine = LLMEngine(WorkerSettings(cache_dir=builtin_cache_dir, device="cpu", dtype="float32",
                                      quantization="q4", max_model_len=256, num_kv_blocks=24,
                                      enable_prefix_caching=False))
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, tokenize=True, return_dict=False)
    requests = {"a": (list(prompt), SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)),
                "b": (list(range(400, 440)), SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))}
    native = run(engine, requests)
    requests = {f"ref-{key}": request for key, request in requests.items()}
    layers = [m for m in engine.model_runner.model.modules() if isinstance(m, QuantLinear)]
    assert {m.mode for m in layers} == {"native"}
    for module in layers:
        module.mode = "reference"
    reference = run(engine, requests)
    assert "Paris" in native["a"]["text"]
    for key in native:
        assert native[key]["token_ids"] == reference[f"ref-{key}"]["token_ids"]


def _assign_dequantized(ref, model, name: str, weight: torch.Tensor) -> None:
    """Write an engine layer's dequantized weight into the transformers model (split fused ones)."""
    if name == "lm_head":
        ref.lm_head.weight.copy_(weight)
        return
    layer = ref.model.layers[int(name.split(".")[2])]
    if name.endswith("qkv_proj"):
        attn = model.model.layers[0].self_attn
        q, k, v = weight.split([attn.q_size, attn.kv_size, attn.kv_size])
        for proj, part in zip(("q_proj", "k_proj", "v_proj"), (q, k, v), strict=True):
            getattr(layer.self_attn, proj).weight.copy_(part)
    elif name.endswith("gate_up_proj"):
        gate, up = weight.chunk(2)
        layer.mlp.gate_proj.weight.copy_(gate)
        layer.mlp.up_proj.weight.copy_(up)
    else:
        layer.get_submodule(name.split(".", 3)[3]).weight.copy_(weight)


# Perplexity may grow at most this much over fp32 (the quality gate). The built-in
# model's fp32 weights are its dequantized Q4_1 GGUF, so q4 (served from that GGUF) must match.
# ("auto", "auto"): the defaults, the built-in model at its shipped precision (its Q4_1 blocks for
# the decode rows, oneDNN's bf16 copy of them for the scored windows where bf16 is native).
GATE = {("bfloat16", "none"): 0.01, ("float32", "int8"): 0.01, ("float32", "q4"): 0.01,
        ("auto", "auto"): 0.01}
GATE_TOKENS = 512


def test_quality_gate_on_the_builtin_model(builtin_cache_dir, run):
    from benchmark.quality import agreement, docs_token_ids, score_text
    from mstar.engine.llm_engine import LLMEngine
    from mstar.settings import WorkerSettings

    question = [{"role": "user", "content": "What is the capital of France?"}]

    def score(dtype: str, quantization: str):
        engine = LLMEngine(WorkerSettings(cache_dir=builtin_cache_dir, device="cpu", dtype=dtype,
                                          quantization=quantization, max_model_len=512,
                                          num_kv_blocks=20))
        # Decoding one sequence takes the small-batch kernels, which the prefill scoring does not.
        prompt = engine.tokenizer.apply_chat_template(question, add_generation_prompt=True,
                                                      tokenize=True, return_dict=False)
        answer = run(engine, {"q": (list(prompt), SamplingParams(temperature=0, max_tokens=12))})
        assert "Paris" in answer["q"]["text"], (dtype, quantization)
        return score_text(engine, docs_token_ids(engine.tokenizer, GATE_TOKENS), window=256)

    fp32 = score("float32", "none")
    assert 5 < fp32.perplexity < 500  # a working model on English technical prose
    for (dtype, quantization), bound in GATE.items():
        got = score(dtype, quantization)
        assert got.perplexity <= fp32.perplexity * (1 + bound), (dtype, quantization)
        assert agreement(got, fp32) >= 0.9, (dtype, quantization)
