"""Random Llama checkpoints of a chosen shape, saved with the tiny tokenizer (for served tests
whose model must differ from the shared tiny ones: more positions, wider layers)."""

from __future__ import annotations

from pathlib import Path


def save_random_llama(path: Path, tokenizer, **shape) -> Path:
    """A two-layer random Llama (seed 0) with ``shape`` (hidden_size, intermediate_size, head
    counts, max_position_embeddings) saved at ``path`` with ``tokenizer``; returns ``path``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=len(tokenizer), num_hidden_layers=2, rms_norm_eps=1e-6, rope_theta=10000.0,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.bos_token_id, tie_word_embeddings=False, **shape)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
