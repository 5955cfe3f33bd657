"""A tiny random Whisper built in code (config, weights, tokenizer, feature extractor and
generation config saved as a plain HF directory), test audio, and transformers' greedy
``generate`` as the oracle."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, this is a test",
          "speech to text with a tiny model", "one two three four five six seven"] * 3
RATE = 16000
CROSS_GAIN = 6.0
CONV_GAIN = 20.0
NUM_STAMPS = 200  # timestamps up to 3.98 s: the test clips are shorter


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(NUM_STAMPS)]
    fast.add_special_tokens({"additional_special_tokens": SPECIALS[1:] + stamps})
    fast.add_tokens(["<|endoftext|>"], special_tokens=True)
    return fast


def make_whisper_dir(path: Path, seed: int = 1234) -> Path:
    """Saves the tiny model under ``path`` and returns it."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    tok = build_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    vocab = len(tok)
    config = WhisperConfig(
        vocab_size=vocab, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=1500, max_target_positions=64,
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        begin_suppress_tokens=None, suppress_tokens=None)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():  # a loud cross-attention: the outputs follow the audio
        for name, p in model.model.decoder.named_parameters():
            if p.dim() == 2 and "encoder_attn" in name:
                p.mul_(CROSS_GAIN)
        for conv in (model.model.encoder.conv1, model.model.encoder.conv2):
            conv.weight.mul_(CONV_GAIN)  # features over the positional embeddings
    space = tok.convert_tokens_to_ids("Ġ")
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"], is_multilingual=False, max_length=64,
        suppress_tokens=[5, 9, ids["<|startofprev|>"], ids["<|nocaptions|>"]],
        begin_suppress_tokens=[space, ids["<|endoftext|>"]], max_initial_timestamp_index=50,
        prev_sot_token_id=ids["<|startofprev|>"])
    model.save_pretrained(path)
    tok.save_pretrained(path)
    WhisperFeatureExtractor(feature_size=80).save_pretrained(path)
    return path


def clip(freq: float, seconds: float = 1.5, seed: int = 0) -> np.ndarray:
    """A tone with a little noise: distinct audio per (freq, seed)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32)


@functools.cache
def _reference(model_dir: str):
    """transformers' model of the directory, loaded once per test session."""
    import torch
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()


def hf_greedy(model_dir: Path, features, prompt: list[int], max_new: int,
              timestamps: bool) -> list[int]:
    """transformers' generate (greedy, fp32): the generated ids after ``prompt``."""
    import torch

    model = _reference(str(model_dir))
    # transformers' prompt_ids: <|startofprev|> and the text, before <|startoftranscript|>
    prompt_ids = prompt[:prompt.index(model.generation_config.decoder_start_token_id)]
    with torch.inference_mode():
        # One window (force_unique_generate_call): the engine runs one window per request.
        out = model.generate(features, do_sample=False, max_new_tokens=max_new,
                             return_timestamps=timestamps, force_unique_generate_call=True,
                             return_dict_in_generate=True,
                             prompt_ids=torch.tensor(prompt_ids) if prompt_ids else None)
    seq = out["sequences"][0].tolist()
    return seq[len(prompt):] if seq[:len(prompt)] == prompt else seq


def generation_config(model_dir: Path) -> dict:
    return json.loads((Path(model_dir) / "generation_config.json").read_text())
