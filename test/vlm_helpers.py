"""Tiny random vision-language models saved in code (model + processor + tokenizer), the
transformers oracle on the same inputs, and a one-sequence paged greedy loop for model tests
that run before (and without) the engine."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import torch

IMAGE_SIZE = 32  # the vision tower's tile; images of up to 2x2 tiles plus a global one
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<image>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-6,
             initializer_range=0.1)
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
               image_size=IMAGE_SIZE, patch_size=8)


def image(seed: int, size: tuple[int, int] = (48, 40)):
    """A random RGB picture (PIL), (width, height)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def _smolvlm(tokenizer, path: Path):
    import transformers as tf

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": [
        "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
        *[f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]]})
    tok.chat_template = CHAT_TEMPLATE
    image_proc = tf.Idefics3ImageProcessorPil(size={"longest_edge": 2 * IMAGE_SIZE},
                                              max_image_size={"longest_edge": IMAGE_SIZE})
    processor = tf.Idefics3Processor(image_processor=image_proc, tokenizer=tok, image_seq_len=4,
                                     chat_template=CHAT_TEMPLATE)
    text = tf.LlamaConfig(**_TEXT, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
    config = tf.Idefics3Config(text_config=text.to_dict(), vision_config=_VISION, scale_factor=2,
                               image_token_id=tok.convert_tokens_to_ids("<image>"),
                               tie_word_embeddings=True)
    return tf.Idefics3ForConditionalGeneration(config), processor


def _llava(tokenizer, path: Path, tower: str):
    import transformers as tf

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    if tower == "clip":
        vision = tf.CLIPVisionConfig(**_VISION, projection_dim=32)
        image_proc = tf.CLIPImageProcessorPil(size={"shortest_edge": IMAGE_SIZE},
                                              crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
        strategy, extra, layer = "default", 1, -2
    else:
        vision = tf.SiglipVisionConfig(**_VISION)
        image_proc = tf.SiglipImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
        strategy, extra, layer = "full", 0, -1
    processor = tf.LlavaProcessor(image_processor=image_proc, tokenizer=tok, patch_size=8,
                                  vision_feature_select_strategy=strategy,
                                  num_additional_image_tokens=extra, chat_template=CHAT_TEMPLATE)
    text = tf.LlamaConfig(**_TEXT, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                          bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id)
    config = tf.LlavaConfig(text_config=text, vision_config=vision,
                            image_token_id=tok.convert_tokens_to_ids("<image>"),
                            vision_feature_select_strategy=strategy, vision_feature_layer=layer,
                            tie_word_embeddings=False)
    return tf.LlavaForConditionalGeneration(config), processor


def _template(marker: str) -> str:
    return CHAT_TEMPLATE.replace("<image>", marker)


def _qwen2_5_vl(tokenizer, path: Path):
    """Dynamic resolution: 8-pixel patches merged 2x2, so an image's token count follows its
    size; M-RoPE sections over a 16-dim head."""
    import transformers as tf

    from mstar.models.vision.qwen2_5_vl import Qwen2_5_VLImagesProcessor

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": [
        "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]})
    template = _template("<|vision_start|><|image_pad|><|vision_end|>")
    tok.chat_template = template
    image_proc = tf.Qwen2VLImageProcessorPil(
        size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64}, patch_size=8,
        temporal_patch_size=2, merge_size=2)
    processor = Qwen2_5_VLImagesProcessor(image_processor=image_proc, tokenizer=tok,
                                          chat_template=template)
    ids = tok.convert_tokens_to_ids
    text = dict(_TEXT, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                  temporal_patch_size=2, spatial_merge_size=2, window_size=32,
                  fullatt_block_indexes=[1], out_hidden_size=_TEXT["hidden_size"])
    config = tf.Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                                 image_token_id=ids("<|image_pad|>"),
                                 video_token_id=ids("<|video_pad|>"),
                                 vision_start_token_id=ids("<|vision_start|>"),
                                 vision_end_token_id=ids("<|vision_end|>"),
                                 tie_word_embeddings=False)
    return tf.Qwen2_5_VLForConditionalGeneration(config), processor


_GEMMA3_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                  "image_token": "<image_soft_token>"}


def _gemma3(tokenizer, path: Path):
    """A SigLIP tower of 4x4 patches pooled to 16 tokens per image; the sliding window (8) is
    shorter than an image's run, so the window and the image's bidirectional block both count."""
    import tempfile

    import transformers as tf

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        tok = tf.AutoTokenizer.from_pretrained(tmp, extra_special_tokens=_GEMMA3_TOKENS)
    template = _template("<start_of_image>")
    tok.chat_template = template
    image_proc = tf.Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = tf.Gemma3Processor(image_processor=image_proc, tokenizer=tok, image_seq_length=16,
                                   chat_template=template)
    text = tf.Gemma3TextConfig(
        **_TEXT, head_dim=16, vocab_size=len(tok), eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=16)
    ids = tok.convert_tokens_to_ids
    vision = tf.SiglipVisionConfig(**_VISION, vision_use_head=False)  # as Google's checkpoints
    config = tf.Gemma3Config(text_config=text, vision_config=vision,
                             mm_tokens_per_image=16, boi_token_index=ids("<start_of_image>"),
                             eoi_token_index=ids("<end_of_image>"),
                             image_token_index=ids("<image_soft_token>"),
                             tie_word_embeddings=False)  # tied, a random model repeats its input
    model = tf.Gemma3ForConditionalGeneration(config)
    with torch.no_grad():  # transformers starts the projection at zero: images would not count
        model.model.multi_modal_projector.mm_input_projection_weight.normal_(0.0, 1.0)
    return model, processor


FAMILIES = {
    "smolvlm": _smolvlm,
    "qwen2_5_vl": _qwen2_5_vl,
    "gemma3": _gemma3,
    "llava_clip": lambda tok, path: _llava(tok, path, "clip"),
    "llava_siglip": lambda tok, path: _llava(tok, path, "siglip"),
}


def make_tiny_vlm(family: str, tokenizer, path: Path) -> Path:
    torch.manual_seed(1234)
    model, processor = FAMILIES[family](tokenizer, path)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def prompt_text(processor, text: str, num_images: int) -> str:
    content = [{"type": "image"}] * num_images + [{"type": "text", "text": text}]
    return processor.apply_chat_template([{"role": "user", "content": content}],
                                         add_generation_prompt=True, tokenize=False)


@functools.lru_cache(maxsize=2)  # the tests of one family ask it several times in a row
def _oracle(model_dir: Path):
    from transformers import AutoModelForImageTextToText

    from mstar.models.vision.inputs import load_processor

    processor = load_processor(model_dir)  # transformers' own (Qwen2.5-VL's without video)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    return processor, model


def transformers_greedy(model_dir: Path, text: str, images: list, max_new: int) -> list[int]:
    """The oracle: the processor and generate of transformers, fp32 on CPU."""
    processor, model = _oracle(model_dir)
    batch = processor(text=[text], images=[images] if images else None, return_tensors="pt",
                      add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new, pad_token_id=0)
    return out[0, batch["input_ids"].shape[1]:].tolist()


def paged_greedy(model, prompt_ids: list[int], images, max_new: int, block_size: int = 16):
    """One sequence through the paged KV cache: the prompt (image rows merged), then decodes."""
    from mstar.engine.attention import AttentionInputs, get_backend
    from mstar.engine.kv.kv_cache import allocate_kv_cache
    from mstar.models.loading.registry import model_entry

    backend = get_backend("torch")
    total = len(prompt_ids) + max_new
    blocks = -(-total // block_size)
    allocate_kv_cache(model, backend, blocks, block_size, torch.device("cpu"), torch.float32)
    table = torch.arange(blocks).unsqueeze(0)
    ids = list(prompt_ids)
    out = []
    start = 0
    spans = ()  # image runs attended both ways in prefill (Gemma 3)
    entry = model_entry(model.config)  # what the architecture declares
    if entry.bidirectional_image_attention:
        spans = tuple((item.offset, item.end) for item in images)
    rope = model.rope_positions(prompt_ids, images) if entry.rope_position_table else None
    with torch.inference_mode():
        while len(out) < max_new:
            new = ids[start:]
            n = len(new)
            meta = backend.build(AttentionInputs(
                slot_mapping=torch.arange(start, start + n), block_tables=table,
                context_lens=torch.tensor([start + n]), query_lens=[n],
                context_lens_list=[start + n], num_decodes=int(n == 1), block_size=block_size,
                dtype=torch.float32, seq_keys=[0], bidirectional_spans=[spans if start == 0 else ()]))
            meta.begin_forward()
            tokens = torch.tensor(new)
            embeds = model.embed(tokens)
            for item in images if start == 0 else ():
                rows = torch.tensor(item.positions)
                embeds = model.merge(embeds, rows, model.encode(item.tensors))
            positions = torch.arange(start, start + n)
            if rope is not None:  # M-RoPE: the prompt's table, then index + delta
                positions = rope[0] if start == 0 else (positions + rope[1]).expand(3, -1)
            hidden = model(tokens, positions, meta, inputs_embeds=embeds)
            token = int(model.compute_logits(hidden[-1:]).argmax(-1))
            out.append(token)
            start += n
            ids.append(token)
    return out
