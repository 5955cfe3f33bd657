"""The tiny random CSM the speech tests share (float32): its config, a saved directory and
transformers' greedy reference (``CsmForConditionalGeneration.generate``)."""

from __future__ import annotations

import torch

CODEBOOKS, CODES = 4, 16
PROMPT = [5, 17, 42, 99, 7, 250]
# Largest sample difference allowed against the whole decode, relative to its peak. Each chunk's
# Mimi decode sees only its left context, not everything before it; this tiny Mimi's reach is
# under 2 frames, so with CSM's 8 the windows match to float rounding (measured 1.5e-7 of the
# peak; with no left context 0.74, with 1 frame 0.08). A real Mimi reaches further (its
# transformer attends 250 frames back), which is why the policy's left context is a trade-off.
WAVE_TOLERANCE = 1e-4


def csm_config(text_vocab: int, positions: int = 256):
    from transformers import CsmConfig

    depth = dict(num_codebooks=CODEBOOKS, backbone_hidden_size=32, vocab_size=CODES,
                 hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1,
                 max_position_embeddings=CODEBOOKS + 1)
    mimi = dict(model_type="mimi", hidden_size=16, num_filters=4, upsampling_ratios=[2, 2],
                codebook_size=CODES, codebook_dim=8, num_quantizers=CODEBOOKS,
                vector_quantization_hidden_dimension=8, upsample_groups=16,
                num_hidden_layers=1, intermediate_size=32, num_attention_heads=2,
                num_key_value_heads=2, sliding_window=16)
    return CsmConfig(num_codebooks=CODEBOOKS, vocab_size=CODES, text_vocab_size=text_vocab,
                     hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                     pad_token_id=1, bos_token_id=0, audio_token_id=2, audio_eos_token_id=3,
                     codebook_pad_token_id=CODES - 1, codebook_eos_token_id=0,
                     depth_decoder_config=depth, codec_config=mimi)


def save_tiny_csm(path, tokenizer, seed: int = 0, positions: int = 256):
    """A tiny random CSM saved with ``tokenizer`` under ``path``; returns the path. ``positions``:
    the backbone's (its prompt and frames), for a served request that must run long."""
    from transformers import CsmForConditionalGeneration

    torch.manual_seed(seed)
    model = CsmForConditionalGeneration(csm_config(len(tokenizer), positions)).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def reference(model, ids, frames, audio=False):
    """transformers' greedy codes [1, frames, K] (or, with ``audio``, its waveforms)."""
    return model.generate(input_ids=torch.tensor([ids]), max_new_tokens=frames, do_sample=False,
                          depth_decoder_do_sample=False, output_audio=audio)
