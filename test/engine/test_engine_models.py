"""Model plumbing users can trip over: rope variants, unsupported configs, weight loading."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from mstar.models.layers.blocks import rope_inv_freq, rope_parameters
from mstar.models.loading.registry import get_model_class

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 1024,
               "rope_theta": 500000.0}


def test_llama3_rope_matches_transformers():
    config = LlamaConfig(hidden_size=128, num_attention_heads=2, max_position_embeddings=4096,
                         rope_scaling=dict(LLAMA3_ROPE))
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    got = rope_inv_freq(64, rope_parameters(config))
    torch.testing.assert_close(got, expected)


def test_unsupported_rope_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unsupported rope_scaling type 'yarn'"):
        rope_inv_freq(64, {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0})


def test_unknown_architecture_lists_supported():
    config = LlamaConfig(architectures=["GPT2LMHeadModel"])
    with pytest.raises(ValueError, match="supported: .*LlamaForCausalLM, .*Qwen2ForCausalLM"):
        get_model_class(config)


def test_missing_weights_are_reported(tiny_model_dir, tmp_path, make_engine):
    from safetensors.torch import load_file, save_file

    src = tiny_model_dir("llama")
    for f in src.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    tensors = load_file(src / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    del tensors["model.layers.0.self_attn.k_proj.weight"]  # one shard of a fused projection
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    lacking = r"lacks weights for: \['model.layers.0.self_attn.k_proj.weight', 'model.layers.1.mlp"
    with pytest.raises(ValueError, match=lacking):
        make_engine(tmp_path, num_kv_blocks=8)
