"""Checkpoint layouts and config values users bring: sharded files with an index, stray
extra exports, and config values mstar does not implement (a clear error naming the field)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from mstar.engine.request.sampling_params import SamplingParams


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_sharded_checkpoint_with_index_loads_only_its_shards(tiny_model_dir, tmp_path,
                                                             make_engine, run, tiny_tokenizer):
    src = tiny_model_dir("qwen3_moe")
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    tiny_tokenizer.save_pretrained(sharded)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    # An export the index does not name (like Mistral's consolidated.safetensors) is ignored.
    save_file({"unrelated.weight": torch.zeros(2)}, sharded / "consolidated.safetensors")
    params = SamplingParams(temperature=0, max_tokens=12)
    prompt = tiny_tokenizer.encode("The quick brown fox")
    whole = run(make_engine(src, num_kv_blocks=32), {"r": (prompt, params)})
    split = run(make_engine(sharded, num_kv_blocks=32), {"r": (prompt, params)})
    assert split["r"]["token_ids"] == whole["r"]["token_ids"]


@pytest.mark.parametrize(("family", "field", "value", "message"), [
    ("mistral", "rope_scaling", {"rope_type": "yarn", "factor": 2.0,
                                 "original_max_position_embeddings": 64},
     "unsupported rope_scaling type 'yarn': mstar supports 'default', 'linear' and 'llama3'"),
    ("gemma3", "hidden_activation", "relu",
     "unsupported hidden_activation 'relu'; supported: gelu_pytorch_tanh, gelu"),
    ("gemma3", "use_bidirectional_attention", True,
     "unsupported use_bidirectional_attention=True (an embedding model); supported: False"),
])
def test_unsupported_config_value_names_the_field(family, field, value, message, tiny_model_dir,
                                                  tmp_path, make_engine):
    model_dir = _copy(tiny_model_dir(family), tmp_path / family)
    config = json.loads((model_dir / "config.json").read_text())
    if field == "rope_scaling":  # the legacy field is read only without rope_parameters
        config.pop("rope_parameters")
    config[field] = value
    (model_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=re.escape(message)):
        make_engine(model_dir, num_kv_blocks=8)


def test_sliding_window_models_stay_on_a_backend_that_supports_them(monkeypatch):
    """The triton kernels have no sliding window or custom scale: auto keeps Mistral/Gemma 3 on
    the torch backend; asking for triton explicitly is a start-up error naming what is missing."""
    from mstar.engine import attention
    from mstar.settings import WorkerSettings

    monkeypatch.setattr(attention, "triton_available", lambda: True)
    cuda = torch.device("cuda")

    def choose(value, needs):
        return attention.choose_attention_backend(WorkerSettings(attention_backend=value), cuda,
                                                  needs)

    assert choose("auto", set()) == "triton"
    assert choose("auto", {"sliding_window"}) == "torch"
    with pytest.raises(ValueError, match="triton does not support this model's scale, "
                                         "sliding_window; use auto or torch"):
        choose("triton", {"sliding_window", "scale"})


def test_multi_token_prediction_weights_are_skipped(tiny_model_dir, tmp_path, make_engine, run,
                                                   tiny_tokenizer):
    """Qwen3.5 checkpoints carry an ``mtp.*`` head mstar does not run: it loads all the same."""
    src = tiny_model_dir("qwen3_5")
    model_dir = _copy(src, tmp_path / "with-mtp")
    save_file({"mtp.fc.weight": torch.zeros(4, 4)}, model_dir / "mtp.safetensors")
    params = SamplingParams(temperature=0, max_tokens=6)
    prompt = tiny_tokenizer.encode("Hello world!")
    plain = run(make_engine(src, num_kv_blocks=32), {"r": (prompt, params)})
    with_mtp = run(make_engine(model_dir, num_kv_blocks=32), {"r": (prompt, params)})
    assert with_mtp["r"]["token_ids"] == plain["r"]["token_ids"]
