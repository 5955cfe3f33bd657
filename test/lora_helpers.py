"""Random PEFT LoRA adapters on the tiny test models, and transformers + PEFT's reference."""

from __future__ import annotations

from pathlib import Path

ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
MLP = ["gate_proj", "up_proj", "down_proj"]


def make_adapter(base_dir: Path, out: Path, seed: int, targets: list[str], rank: int = 8,
                 alpha: int = 16, rslora: bool = False) -> Path:
    """A rank-``rank`` adapter with random A and B (PEFT's default B is zero: no effect)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets,
                        init_lora_weights=False, use_rslora=rslora)
    get_peft_model(model, config).save_pretrained(out)
    return out


def merged_greedy(base_dir: Path, adapter: Path | None, prompts: list[list[int]],
                  max_new: int) -> list[list[int]]:
    """transformers' greedy tokens (fp32, CPU, each prompt alone) with the adapter merged by
    PEFT's ``merge_and_unload`` (None: the base model)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    model.eval()
    outs = []
    for ids in prompts:
        with torch.inference_mode():
            gen = model.generate(torch.tensor([ids]),
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=max_new, pad_token_id=0)
        outs.append(gen[0, len(ids):].tolist())
    return outs
