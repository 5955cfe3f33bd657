"""Reading PEFT adapters onto the model: what is refused at load (naming the module, the rank or
the shape), and the scaling PEFT uses (rsLoRA included)."""

from __future__ import annotations

import json

import pytest
from lora_helpers import ATTN, make_adapter

from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.lora.adapter import AdapterError, scaling_of


@pytest.fixture(scope="module")
def base(tiny_model_dir):
    return tiny_model_dir("llama")


def _llm(base, modules: str, **knobs):
    from mstar import LLM

    return LLM(str(base), device="cpu", dtype="float32", kv_block_size=4, num_kv_blocks=64,
               lora_modules=modules, **knobs)


def test_scaling_is_alpha_over_rank_or_over_its_root_with_rslora():
    assert scaling_of({"lora_alpha": 16}, 8) == 2.0
    assert scaling_of({"lora_alpha": 16, "use_rslora": True}, 4) == 8.0


def test_an_unsupported_module_is_refused_naming_it(base, tmp_path):
    path = make_adapter(base, tmp_path / "head", 1, ["q_proj", "lm_head"])
    with pytest.raises(AdapterError, match="'lm_head' is not supported"):
        _llm(base, f"head={path}")


def test_a_rank_over_the_limit_is_refused(base, tmp_path):
    path = make_adapter(base, tmp_path / "r16", 1, ATTN, rank=16)
    with pytest.raises(AdapterError, match="rank 16 is outside 1..8"):
        _llm(base, f"r16={path}", max_lora_rank=8)


def test_dora_is_refused(base, tmp_path):
    path = make_adapter(base, tmp_path / "dora", 1, ATTN)
    config = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterError, match="use_dora"):
        _llm(base, f"dora={path}")


def test_another_base_models_adapter_is_refused_naming_the_linear(base, tiny_model_dir, tmp_path):
    other = make_adapter(tiny_model_dir("qwen3"), tmp_path / "qwen3", 1, ["o_proj"])
    with pytest.raises(AdapterError, match="o_proj expects A"):
        _llm(base, f"other={other}")


def test_runtime_load_unload_offline(base, tmp_path):
    """engine.load_lora / unload_lora: the name is selectable, then refused once unloaded."""
    llm = _llm(base, None, allow_runtime_lora_updating=True)
    llm.engine.load_lora("late", make_adapter(base, tmp_path / "late", 5, ATTN))
    params = SamplingParams(temperature=0, max_tokens=4, lora="late")
    [out] = llm.generate([{"prompt_token_ids": [1, 2, 3]}], params)
    assert len(out.token_ids) == 4
    with pytest.raises(ValueError, match="already loaded"):
        llm.engine.load_lora("late", tmp_path / "late")
    llm.engine.unload_lora("late")
    llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=1))  # sweeps it
    assert llm.engine.lora_names() == []
    with pytest.raises(ValueError, match="'late' does not exist"):
        llm.generate([{"prompt_token_ids": [1, 2, 3]}], params)


@pytest.mark.parametrize("quantization", ["int8", "q4"])
def test_the_delta_runs_beside_a_quantized_base(base, tmp_path, quantization):
    """The projections are wrapped before they are quantized: the base runs its quantized
    kernel, the adapter's delta (float) is added beside it and changes the answer."""
    path = make_adapter(base, tmp_path / "a", 3, ATTN)
    llm = _llm(base, f"a={path}", quantization=quantization)
    prompt = [{"prompt_token_ids": [5, 6, 7, 8, 9]}] * 2
    outs = llm.generate(prompt, [SamplingParams(temperature=0, max_tokens=8, ignore_eos=True,
                                                lora=lora) for lora in (None, "a")])
    assert outs[0].token_ids != outs[1].token_ids


def test_config_validate_checks_adapters_against_the_base(base, tiny_model_dir, tmp_path):
    """`mstar config validate --model`'s preflight, from the files alone: a fitting adapter
    passes; another base's adapter, or one over the rank limit, is an error naming it."""
    from mstar.settings import WorkerSettings
    from mstar.settings.checks.preflight import config_path, preflight, read_shape

    good = make_adapter(base, tmp_path / "good", 1, ATTN)
    other = make_adapter(tiny_model_dir("qwen3"), tmp_path / "other", 1, ["o_proj"])

    def lora_errors(modules: str, rank: int = 8) -> list[str]:
        settings = WorkerSettings(lora_modules=modules, max_lora_rank=rank, device="cpu")
        problems = preflight(settings, read_shape(config_path(str(base), settings)))
        return [p.reason for p in problems if p.variable == "MSTAR_LORA_MODULES" and p.error]

    assert lora_errors(f"good={good}") == []
    [wrong] = lora_errors(f"good={good},other={other}")
    assert "adapter 'other'" in wrong and "o_proj.lora_A.weight has shape" in wrong
    [rank] = lora_errors(f"good={good}", rank=4)
    assert "rank 8 is outside 1..4" in rank


def test_a_reloaded_name_does_not_reuse_the_old_adapters_cache(base, tmp_path):
    """Prefix-cache keys follow the adapter's load, not only its name: another adapter loaded
    under an unloaded one's name gets its own K/V, so its tokens are the merged reference's."""
    from lora_helpers import merged_greedy

    first = make_adapter(base, tmp_path / "first", 7, ATTN)
    second = make_adapter(base, tmp_path / "second", 8, ATTN)
    llm = _llm(base, f"x={first}")
    prompt = list(range(5, 18))  # three full 4-token blocks cached
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, lora="x")
    llm.generate([{"prompt_token_ids": prompt}], params)
    llm.engine.unload_lora("x")
    llm.generate([{"prompt_token_ids": [1, 2]}], SamplingParams(max_tokens=1))  # sweeps it
    llm.engine.load_lora("x", second)
    [out] = llm.generate([{"prompt_token_ids": prompt}], params)
    assert out.token_ids == merged_greedy(base, second, [prompt], 6)[0]
