"""benchmark/roofline.py on the tiny tied Qwen3: the weight bytes and FLOPs per token it counts from
the loaded model, the limit arithmetic of its table, and one short run end to end."""

from __future__ import annotations

import pytest

from benchmark.cpu_precision import SETTINGS
from benchmark.roofline import (
    Row,
    arithmetic,
    bandwidth_limit,
    compute_limit,
    compute_peak,
    label,
    main,
    percent,
    table,
)
from benchmark.roofline_machine import Machine, missing
from benchmark.roofline_steps import step_parts
from benchmark.roofline_weights import flops_per_token, weight_bytes
from mstar import LLM
from mstar.kernels.cpu.levels import Feature

ELEMENT = {"fp32": 4, "bf16": 2}  # bytes per dense weight


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen3")  # tied embeddings, q and k norms


def linear_shapes(config) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """(out, in) of one layer's linears, and of the LM head, from the checkpoint's config."""
    h, q = config.hidden_size, config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    i = config.intermediate_size
    return [(q + 2 * kv, h), (h, q), (2 * i, h), (h, i)], (config.vocab_size, h)


def expected_bytes(config, name: str) -> int:
    """What one decode step streams, by the storage formats' definitions: each linear once (the
    tied LM head once, not again as the embedding), the norms, no embedding or rope table."""
    layer, head = linear_shapes(config)
    layers = config.num_hidden_layers
    if name in ELEMENT:
        linears = ELEMENT[name] * (layers * sum(o * i for o, i in layer) + head[0] * head[1])
    else:  # int8 / q4 layers; the head is per-channel int8 in both (one float32 scale a row)
        per_layer = (sum(o * i + 4 * o for o, i in layer) if name == "int8"
                     else sum(o * i // 32 * 20 for o, i in layer))  # Q4_1: 20 bytes per 32
        linears = layers * per_layer + head[0] * head[1] + 4 * head[0]
    norms = layers * (2 * config.hidden_size + 2 * config.head_dim) + config.hidden_size
    return linears + norms * ELEMENT.get(name, 4)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_counts_are_the_loaded_tensors(model_dir, name):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    llm = LLM(model=str(model_dir), device="cpu", kv_block_size=4, num_kv_blocks=16, **SETTINGS[name])
    model = llm.engine.model_runner.model
    assert weight_bytes(model) == expected_bytes(config, name)
    layer, head = linear_shapes(config)
    assert flops_per_token(model) == 2 * (config.num_hidden_layers * sum(o * i for o, i in layer)
                                          + head[0] * head[1])


def machine(features: Feature | None) -> Machine:
    peaks = {"float32": 100e9, "bfloat16": 400e9, "int8": 800e9}
    return Machine(2, features, 10e9, {k: v if not missing(k, features) else None
                                       for k, v in peaks.items()})


def test_limit_arithmetic():
    # The figures: 29.4 GB/s over 269 MB per token caps one stream at ~109 tok/s, and
    # 48.9 tok/s is 45 % of it.
    cap = bandwidth_limit(29.4e9, 269_000_000)
    assert cap == pytest.approx(109.29, abs=0.01)
    assert round(percent(48.9, cap)) == 45
    assert compute_limit(100e9, 250_000_000) == pytest.approx(400.0)
    rows = [Row("fp32", "float32", 100_000_000, 1_000_000_000, {}, one=50.0, many=25.0),
            Row("q4", "int8", 25_000_000, 1_000_000_000, {}, one=100.0, many=200.0)]
    lines = table(rows, machine(Feature.AVX2 | Feature.AVX512_VNNI), 32).splitlines()
    fp32 = [c.strip() for c in lines[2].split("|")]
    q4 = [c.strip() for c in lines[3].split("|")]
    # fp32: bandwidth limit 10 GB/s / 100 MB = 100 tok/s; compute 100 GFLOP/s / 1 GFLOP = 100
    assert fp32[4:] == ["100.0", "50%", "25.0", "100.0", "25%", "float32"]
    # q4: 10 GB/s / 25 MB = 400 tok/s; int8's 800 GOP/s / 1 GFLOP = 800
    assert q4[4:] == ["400.0", "25%", "200.0", "800.0", "25%", "int8"]


def test_types_the_cpu_lacks_fall_back_to_float32():
    plain = machine(Feature.AVX2)
    bf16 = Row("bf16", arithmetic(SETTINGS["bf16"]), 1, 1, {}, default=True)
    assert missing("bfloat16", Feature.AVX2) == "no avx512_bf16 or amx"
    assert compute_peak("bfloat16", plain) == (100e9, "float32 (no avx512_bf16 or amx)")
    assert compute_peak(arithmetic(SETTINGS["q4"]), plain)[0] == 100e9
    assert label(bf16, plain) == "bf16 (default, emulated)"
    native = machine(Feature.AVX2 | Feature.AVX512_BF16)
    assert compute_peak("bfloat16", native) == (400e9, "bfloat16")
    assert label(bf16, native) == "bf16 (default)"
    assert missing("int8", None) == "native kernels unavailable"


def test_short_run_prints_the_table(model_dir, capsys):
    argv = ["--model", str(model_dir), "--settings", "fp32", "bf16", "--tokens", "2",
            "--repeats", "1", "--concurrency", "2", "--bandwidth-mb", "8", "--gemm-size", "64"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "read bandwidth:" in out and "threads:" in out
    # The default settings (MSTAR_DTYPE=auto: float32 or bfloat16, unquantized) are one of the
    # two, which is marked, not loaded again: two rows in the roofline table, two in the step one.
    rows = [line.strip() for line in out.splitlines() if line.lstrip().startswith(("fp32 ", "bf16 "))]
    assert len(rows) == 4
    assert sum("(default" in row for row in rows) == 2


@pytest.mark.parametrize("name", ["fp32", "q4"])
def test_step_parts_time_the_stack_and_the_head(model_dir, name):
    llm = LLM(model=str(model_dir), device="cpu", kv_block_size=4, num_kv_blocks=16, **SETTINGS[name])
    model = llm.engine.model_runner.model
    parts = step_parts(llm, "Hello world!", 16)
    assert parts.stack_ms > 0 and parts.head_ms > 0
    # The two parts stream every weight of the model between them, the tied head once.
    assert parts.stack_bytes + parts.head_bytes == weight_bytes(model)
