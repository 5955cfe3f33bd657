"""Tiny random ``<Family>ForSequenceClassification`` model directories, built in code (the tests
of rerank, score and classify; see test/conftest.py's tiny_model_dir for the causal LMs)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_classifier(path: Path, family: str, labels: int, tokenizer) -> Path:
    """A tiny random classifier of ``family`` (llama, qwen2, qwen3) with ``labels`` labels."""
    import torch
    from conftest import _config
    from transformers import AutoModelForSequenceClassification

    config = _config(family, len(tokenizer), tokenizer.eos_token_id, tokenizer.bos_token_id)
    config.num_labels = labels
    torch.manual_seed(99)
    model = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
