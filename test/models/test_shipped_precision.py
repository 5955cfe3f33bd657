"""MSTAR_QUANTIZATION=auto: a model whose weights ship quantized (the built-in model, a GGUF) is
served at that precision (``mstar.models.loading.shipped``), with oneDNN's bf16 copy of each
quantized layer for wide batches where bf16 is native (``QuantLinear(copy=True)``)."""

from __future__ import annotations

import json

import pytest
import torch
from quant_weights import random_weight

from mstar.engine.placement import resolve_device_dtype, resolve_kv_dtype
from mstar.models.layers.cpu_linear import native_bf16
from mstar.models.loading.shipped import weights_quantization
from mstar.models.quant.formats import dequantize
from mstar.models.quant.linear import QuantLinear, copy_rows
from mstar.settings import WorkerSettings
from mstar.settings.checks.auto_precision import CONVERTED_MARKER, GGUF_SOURCE_FILE, SHIPPED
from mstar.settings.checks.preflight import read_shape, resolved_precision

CPU = torch.device("cpu")
needs_bf16 = pytest.mark.skipif(not native_bf16(),
                                reason="this CPU lacks avx512_bf16 and amx (oneDNN's bf16 copy)")


@pytest.fixture(params=["builtin", "gguf"])
def shipped_dir(request, tmp_path):
    """A directory the loader reads as shipped quantized: the built-in model's (its conversion
    marker) or a GGUF model's (its source note)."""
    if request.param == "builtin":
        (tmp_path / CONVERTED_MARKER).write_text(json.dumps({"source": "model.gguf"}))
    else:
        (tmp_path / GGUF_SOURCE_FILE).write_text(json.dumps({"gguf": "model.gguf"}))
    return tmp_path


def test_auto_serves_a_shipped_quantized_model_at_its_precision(shipped_dir):
    assert weights_quantization(WorkerSettings(), shipped_dir, CPU) == SHIPPED


@pytest.mark.parametrize("knobs", [
    {"dtype": "float32"}, {"dtype": "bfloat16"},  # an explicit dtype asks for dense weights
    {"tensor_parallel_size": 2},  # both need a safetensors checkpoint
    {"allow_runtime_lora_updating": True},
])
def test_auto_keeps_dense_weights_where_the_run_asks_for_them(shipped_dir, knobs):
    assert weights_quantization(WorkerSettings(**knobs), shipped_dir, CPU) == "none"


def test_auto_is_none_on_cuda_and_for_a_dense_checkpoint(shipped_dir, tmp_path_factory):
    assert weights_quantization(WorkerSettings(), shipped_dir, torch.device("cuda")) == "none"
    dense = tmp_path_factory.mktemp("dense")
    assert weights_quantization(WorkerSettings(), dense, CPU) == "none"
    # the built-in Whisper's conversion marker names CTranslate2's model.bin, not a GGUF
    whisper = tmp_path_factory.mktemp("whisper")
    (whisper / CONVERTED_MARKER).write_text(json.dumps({"source": "model.bin"}))
    assert weights_quantization(WorkerSettings(), whisper, CPU) == "none"


@pytest.mark.parametrize("mode", ["none", "int8", "q4"])
def test_a_set_quantization_is_kept(shipped_dir, mode):
    assert weights_quantization(WorkerSettings(quantization=mode), shipped_dir, CPU) == mode


@needs_bf16
@pytest.mark.parametrize("kind", ["q4", "int8"])
def test_the_bf16_copy_runs_the_rows_above_the_kernels(kind, cpu_features):
    """Up to ``kernel_rows`` rows the layer computes what it computes without a copy (the
    quantized kernels); above them oneDNN's bf16 product of bf16-rounded x and weights
    (tolerance: 2^-7 of the sum of the products' magnitudes, as the bf16 tiles' test reasons).
    Where COPY_ROWS holds no copy for the format (int8 with AMX), it computes what it does
    without one at every batch."""
    w = random_weight(kind, 40, 576)
    bias = torch.randn(40)
    plain, copied = QuantLinear(w, bias, "native"), QuantLinear(w, bias, "native", copy=True)
    rows = copied.kernel_rows
    assert plain.kernel_rows is None and rows == copy_rows(kind == "q4")
    if rows is None:
        assert copied.wide is None
        x = torch.randn(64, 576)
        assert torch.equal(copied(x), plain(x))
        return
    x = torch.randn(rows, 576)
    assert torch.equal(copied(x), plain(x))
    for m in (rows + 1, 64):
        x = torch.randn(m, 576)
        xb, wb = x.bfloat16().double(), dequantize(w).bfloat16().double()
        want, magnitude = xb @ wb.T + bias.double(), xb.abs() @ wb.abs().T + bias.abs().double()
        got = copied(x)
        assert got.dtype == torch.float32
        assert ((got.double() - want).abs() <= 2**-7 * magnitude).all()


def test_the_builtin_model_by_default_decodes_its_shipped_blocks(builtin_cache_dir, run):
    """The defaults serve the built-in model ``shipped``: float32 activations on its Q4_1 GGUF's
    blocks, so a short prompt decodes exactly as under MSTAR_QUANTIZATION=q4 (the same integer-dot
    kernels at every step: the prompt is under ``kernel_rows``)."""
    from mstar.engine.llm_engine import LLMEngine
    from mstar.engine.request.sampling_params import SamplingParams

    def tokens(**knobs):
        engine = LLMEngine(WorkerSettings(cache_dir=builtin_cache_dir, device="cpu",
                                          max_model_len=128, num_kv_blocks=16, **knobs))
        prompt = engine.tokenizer.encode("The capital of France is")
        out = run(engine, {"r": (prompt, SamplingParams(temperature=0, max_tokens=12))})
        return engine, out["r"]["token_ids"]

    default, got = tokens()
    assert default.model_runner.quantization == SHIPPED and default.dtype == torch.float32
    layer = default.model_runner.model.model.layers[0].mlp.down_proj
    assert isinstance(layer, QuantLinear) and (layer.wide is not None) == native_bf16()
    _, want = tokens(quantization="q4")
    assert got == want


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "float32", "bfloat16"])
@pytest.mark.parametrize("dtype", ["auto", "float32", "bfloat16"])
@pytest.mark.parametrize("quantization", ["auto", "none", "q4"])
def test_preflight_resolves_the_precision_the_engine_does(shipped_dir, tmp_path_factory,
                                                          quantization, dtype, kv_cache_dtype):
    """One rule per ``auto`` (``auto_precision``), applied by the engine with torch's view of the
    CPU and by preflight with /proc/cpuinfo's: on this machine both give the same activations and
    KV cache, for a shipped-quantized model and a dense one, or both refuse the KV knob."""
    settings = WorkerSettings(device="cpu", quantization=quantization, dtype=dtype,
                              kv_cache_dtype=kv_cache_dtype)
    for model_dir in (shipped_dir, tmp_path_factory.mktemp("dense")):
        (model_dir / "config.json").write_text(json.dumps(
            {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
             "num_hidden_layers": 2, "max_position_embeddings": 64}))
        found = resolved_precision(settings, read_shape(model_dir / "config.json"))
        _, engine_dtype = resolve_device_dtype(settings, model_dir)
        assert found.dtype == str(engine_dtype).removeprefix("torch.")
        kept = weights_quantization(settings, model_dir, CPU)
        try:
            kv = str(resolve_kv_dtype(settings, CPU, engine_dtype, kept)).removeprefix("torch.")
        except ValueError as exc:
            assert found.kv_refused == str(exc)
        else:
            assert found.kv_refused is None and found.kv_dtype == kv
