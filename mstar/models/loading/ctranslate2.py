"""CTranslate2's ``model.bin`` (a Whisper model, as faster-whisper loads it) to a plain Hugging Face
Whisper directory: config.json, model.safetensors, tokenizer files, preprocessor_config.json and
generation_config.json.

The file (binary version 6, written by ``ctranslate2.specs.ModelSpec._serialize``): a uint32
version, the spec name and a uint32 revision, then each variable (name, uint8 rank, uint32 dims,
uint8 dtype id, uint32 byte count, the bytes) and the aliases (name -> variable). Strings are a
uint16 length (with the trailing NUL) and UTF-8 bytes. Dtype ids follow CTranslate2's
``DataType`` enum. Weights are widened to float32, losslessly from float16.

CTranslate2 fuses Whisper's projections: self-attention ``linear_0`` is q, k, v stacked (k has no
bias: its slice of the bias is zero) and ``linear_1`` the output; cross-attention ``linear_0`` is q,
``linear_1`` k and v, ``linear_2`` the output; ``ffn`` is fc1, fc2.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np

SUPPORTED_VERSION = 6
_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # None: bfloat16
TIMESTAMPS = 1501  # <|0.00|> .. <|30.00|>


def read_model_bin(path: Path) -> tuple[str, dict[str, np.ndarray], dict[str, str]]:
    """(spec name, variables, aliases) of a CTranslate2 model.bin."""
    data = Path(path).read_bytes()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        value = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("H")
        text = data[pos:pos + n - 1].decode("utf-8")
        pos += n
        return text

    version = take("I")
    if version != SUPPORTED_VERSION:
        raise ValueError(f"{path}: CTranslate2 binary version {version}; supported: "
                         f"{SUPPORTED_VERSION}")
    spec = string()
    take("I")  # the spec's revision
    variables = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype = _DTYPES[take("B")]
        size = take("I")
        if dtype is None:
            raise ValueError(f"{path}: {name} is bfloat16; convert from a float32/float16 model")
        variables[name] = np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize,
                                        pos).reshape(shape)
        pos += size
    aliases = {string(): string() for _ in range(take("I"))}
    return spec, variables, aliases


def _attention(out: dict, prefix: str, src: dict, base: str, cross: bool, dim: int) -> None:
    """One attention block's q/k/v/out projections, unfused to transformers' names."""
    if cross:
        q_w, q_b = src[f"{base}/linear_0/weight"], src[f"{base}/linear_0/bias"]
        kv_w, kv_b = src[f"{base}/linear_1/weight"], src[f"{base}/linear_1/bias"]
        k_w, v_w, v_b = kv_w[:dim], kv_w[dim:], kv_b[dim:]
        o = 2
    else:
        w, b = src[f"{base}/linear_0/weight"], src[f"{base}/linear_0/bias"]
        q_w, k_w, v_w = w[:dim], w[dim:2 * dim], w[2 * dim:]
        q_b, v_b = b[:dim], b[2 * dim:]
        o = 1
    out |= {f"{prefix}.q_proj.weight": q_w, f"{prefix}.q_proj.bias": q_b,
            f"{prefix}.k_proj.weight": k_w, f"{prefix}.v_proj.weight": v_w,
            f"{prefix}.v_proj.bias": v_b,
            f"{prefix}.out_proj.weight": src[f"{base}/linear_{o}/weight"],
            f"{prefix}.out_proj.bias": src[f"{base}/linear_{o}/bias"]}


def _norm(out: dict, name: str, src: dict, base: str) -> None:
    out[f"{name}.weight"] = src[f"{base}/gamma"]
    out[f"{name}.bias"] = src[f"{base}/beta"]


def _ffn(out: dict, prefix: str, src: dict, base: str) -> None:
    for i, fc in enumerate(("fc1", "fc2")):
        out[f"{prefix}.{fc}.weight"] = src[f"{base}/linear_{i}/weight"]
        out[f"{prefix}.{fc}.bias"] = src[f"{base}/linear_{i}/bias"]
    _norm(out, f"{prefix}.final_layer_norm", src, f"{base}/layer_norm")


def whisper_state_dict(src: dict[str, np.ndarray], dim: int, encoder_layers: int,
                       decoder_layers: int) -> dict[str, np.ndarray]:
    """transformers' WhisperForConditionalGeneration names -> float32 arrays (proj_out tied)."""
    out: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        out[f"model.encoder.{conv}.weight"] = src[f"encoder/{conv}/weight"]
        out[f"model.encoder.{conv}.bias"] = src[f"encoder/{conv}/bias"]
    out["model.encoder.embed_positions.weight"] = src["encoder/position_encodings/encodings"]
    _norm(out, "model.encoder.layer_norm", src, "encoder/layer_norm")
    for i in range(encoder_layers):
        p, b = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        _attention(out, f"{p}.self_attn", src, f"{b}/self_attention", False, dim)
        _norm(out, f"{p}.self_attn_layer_norm", src, f"{b}/self_attention/layer_norm")
        _ffn(out, p, src, f"{b}/ffn")
    out["model.decoder.embed_tokens.weight"] = src["decoder/embeddings/weight"]
    out["model.decoder.embed_positions.weight"] = src["decoder/position_encodings/encodings"]
    _norm(out, "model.decoder.layer_norm", src, "decoder/layer_norm")
    for i in range(decoder_layers):
        p, b = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        _attention(out, f"{p}.self_attn", src, f"{b}/self_attention", False, dim)
        _norm(out, f"{p}.self_attn_layer_norm", src, f"{b}/self_attention/layer_norm")
        _attention(out, f"{p}.encoder_attn", src, f"{b}/attention", True, dim)
        _norm(out, f"{p}.encoder_attn_layer_norm", src, f"{b}/attention/layer_norm")
        _ffn(out, p, src, f"{b}/ffn")
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def _layers(src: dict, side: str) -> int:
    return len({k.split("/")[1] for k in src if re.match(rf"{side}/layer_\d+/", k)})


def convert_whisper(ct2_dir: Path, target: Path) -> None:
    """Write the HF directory for the CTranslate2 Whisper in ``ct2_dir`` into ``target``."""
    from safetensors.numpy import save_file

    spec, src, _ = read_model_bin(Path(ct2_dir) / "model.bin")
    if spec != "WhisperSpec":
        raise ValueError(f"{ct2_dir}: a {spec}, not a WhisperSpec")
    ct2_config = json.loads((Path(ct2_dir) / "config.json").read_text())
    vocab, dim = src["decoder/embeddings/weight"].shape
    enc, dec = _layers(src, "encoder"), _layers(src, "decoder")
    tokenizer = _tokenizer(Path(ct2_dir) / "tokenizer.json", vocab)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (
        "<|endoftext|>", "<|startoftranscript|>", "<|startofprev|>", "<|notimestamps|>")}
    config = _hf_config(src, vocab, dim, enc, dec, ids)
    config.save_pretrained(target)
    save_file(whisper_state_dict(src, dim, enc, dec), str(target / "model.safetensors"),
              metadata={"format": "pt"})
    tokenizer.save_pretrained(target)
    from transformers import WhisperFeatureExtractor

    WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(target)
    _generation_config(ct2_config, ids, vocab).save_pretrained(target)


def _tokenizer(path: Path, vocab: int):
    """The CTranslate2 directory's tokenizer.json plus the timestamp tokens it lacks."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token="<|endoftext|>",
                                  eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                  pad_token="<|endoftext|>")
    missing = vocab - len(tok)
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(TIMESTAMPS)][TIMESTAMPS - missing:]
    tok.add_special_tokens({"additional_special_tokens": stamps})
    if len(tok) != vocab:
        raise ValueError(f"{path}: {len(tok)} tokens, the model has {vocab}")
    return tok


def _hf_config(src: dict, vocab: int, dim: int, enc: int, dec: int, ids: dict):
    from transformers import WhisperConfig

    heads = int(src["decoder/num_heads"])
    return WhisperConfig(
        vocab_size=vocab, num_mel_bins=src["encoder/conv1/weight"].shape[1], d_model=dim,
        encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=int(src["encoder/num_heads"]),
        decoder_attention_heads=heads, encoder_ffn_dim=src["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=src["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=src["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=src["decoder/position_encodings/encodings"].shape[0],
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        architectures=["WhisperForConditionalGeneration"], tie_word_embeddings=True)


def _generation_config(ct2: dict, ids: dict, vocab: int):
    """transformers' generation config for the model (English-only when the vocabulary is the
    English one, 51864 tokens, as faster-whisper decides)."""
    from transformers import GenerationConfig

    multilingual = vocab >= 51865
    if multilingual:
        raise ValueError("converting a multilingual CTranslate2 Whisper is not supported yet")
    return GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"], eos_token_id=ids["<|endoftext|>"],
        bos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        no_timestamps_token_id=ids["<|notimestamps|>"], prev_sot_token_id=ids["<|startofprev|>"],
        is_multilingual=False, max_length=448, max_initial_timestamp_index=50,
        suppress_tokens=list(ct2["suppress_ids"]),
        begin_suppress_tokens=list(ct2["suppress_ids_begin"]),
        alignment_heads=ct2.get("alignment_heads"))
