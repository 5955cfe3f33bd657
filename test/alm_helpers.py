"""Tiny random audio-in language models saved in code (model + processor + tokenizer): Qwen2-Audio
and Voxtral, with the transformers oracle on the same clips. Feature extractors have 16 mel bins
and short windows (1 s at 16 kHz, 128 frames), so a clip is a few dozen placeholder tokens."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import torch

RATE = 16_000
_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
             initializer_range=0.1)
# A Whisper-style encoder: 16 mel bins in, 2 layers, a 128-frame window (64 positions).
_AUDIO = dict(num_mel_bins=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
              d_model=32, max_source_positions=64, initializer_range=0.1)


def clip(seed: int, seconds: float = 0.5) -> np.ndarray:
    """A random mono waveform (float32 at 16 kHz): a few tones and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    tones = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(100, 3000, 3))
    return (0.3 * tones + 0.1 * rng.standard_normal(t.size)).astype(np.float32)


def _extractor():
    import transformers as tf

    return tf.WhisperFeatureExtractor(feature_size=16, sampling_rate=RATE, hop_length=125,
                                      chunk_length=1, n_fft=400)


def _qwen2_audio(tokenizer):
    import transformers as tf

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": [
        "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"]})
    processor = tf.Qwen2AudioProcessor(feature_extractor=_extractor(), tokenizer=tok)
    text = tf.Qwen2Config(**_TEXT, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                          tie_word_embeddings=False)
    audio = tf.Qwen2AudioEncoderConfig(**_AUDIO)
    config = tf.Qwen2AudioConfig(audio_config=audio, text_config=text,
                                 audio_token_id=tok.convert_tokens_to_ids("<|AUDIO|>"))
    return tf.Qwen2AudioForConditionalGeneration(config), processor


def _mistral_like_tokenizer():
    """Voxtral's processor takes token 24 as its audio token (Mistral's tekken has [AUDIO]
    there): a tiny BPE whose first 26 ids are special, 24 = [AUDIO], 25 = [BEGIN_AUDIO]."""
    from conftest import _CORPUS
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", *[f"<SPECIAL_{i}>" for i in range(3, 24)], "[AUDIO]",
                "[BEGIN_AUDIO]"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS * 3, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>", additional_special_tokens=specials[3:])


def _voxtral(tokenizer):
    import transformers as tf

    tok = _mistral_like_tokenizer()
    processor = tf.VoxtralProcessor(feature_extractor=_extractor(), tokenizer=tok)
    text = tf.LlamaConfig(**_TEXT, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                          tie_word_embeddings=False)
    audio = tf.VoxtralEncoderConfig(
        hidden_size=_AUDIO["d_model"], intermediate_size=4 * _AUDIO["d_model"],
        num_hidden_layers=2, num_attention_heads=2, num_mel_bins=16,
        max_source_positions=_AUDIO["max_source_positions"], initializer_range=0.1,
        vocab_size=8)
    config = tf.VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=24)
    return tf.VoxtralForConditionalGeneration(config), processor


FAMILIES = {"qwen2_audio": _qwen2_audio, "voxtral": _voxtral}


def make_tiny_alm(family: str, tokenizer, path: Path) -> Path:
    torch.manual_seed(1234)
    model, processor = FAMILIES[family](tokenizer)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def prompt_text(processor, text: str, num_clips: int) -> str:
    """A ChatML-like prompt with one audio marker per clip before the text."""
    markers = "".join(f"Audio {i + 1}: {processor.audio_token}\n" for i in range(num_clips))
    return f"<|im_start|>user\n{markers}{text}<|im_end|>\n<|im_start|>assistant\n" \
        if "<|im_start|>" in processor.tokenizer.get_vocab() else f"[INST]{markers}{text}[/INST]"


@functools.lru_cache(maxsize=2)
def _oracle(model_dir: Path):
    import transformers as tf

    processor = tf.AutoProcessor.from_pretrained(model_dir)
    arch = tf.AutoConfig.from_pretrained(model_dir).architectures[0]
    model = getattr(tf, arch).from_pretrained(model_dir, dtype=torch.float32).eval()
    return processor, model


def _oracle_inputs(processor, text: str, clips: list) -> dict:
    """transformers' own processing of the prompt: Qwen2-Audio's processor whole; Voxtral's
    needs mistral_common for its chat template, so its token ids are ours (markers expanded, the
    one thing it adds) and its features its processor's own windowing."""
    if type(processor).__name__ == "Qwen2AudioProcessor":
        return dict(processor(text=[text], audio=clips or None, return_tensors="pt"))
    from mstar.models.audio.prompt import build_audio_prompt

    ids, _ = build_audio_prompt(processor, text, clips)
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids),
                                                                            dtype=torch.long)}
    if clips:
        fe = processor.feature_extractor
        batch["input_features"] = processor._retrieve_input_features(
            clips, fe.nb_max_frames, sampling_rate=RATE, padding=True, truncation=False,
            pad_to_multiple_of=fe.n_samples, return_tensors="pt")
    return batch


def transformers_greedy(model_dir: Path, text: str, clips: list, max_new: int) -> list[int]:
    """The oracle: transformers' processing and generate, fp32 on CPU."""
    processor, model = _oracle(model_dir)
    batch = _oracle_inputs(processor, text, clips)
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new, pad_token_id=0)
    return out[0, batch["input_ids"].shape[1]:].tolist()
