"""Qwen2.5-VL: dynamic resolution (an image becomes as many 14-pixel patches as its size needs,
merged 2x2 into its placeholder tokens), transformers' windowed ViT, and a Qwen2 decoder whose
rope is M-RoPE: three position axes (temporal, height, width), each rotating its own section of
the head dimension.

Text tokens have equal positions on the three axes (plain rope); an image's tokens take
(t, row, column) on its grid from where the text left off, and the text after it goes on from
the largest of those plus one. So a prompt's positions are a table (``rope_positions``) and every
later token sits ``delta`` past its index.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import Qwen2_5_VLProcessor
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VisionTransformerPretrainedModel,
)

from mstar.models.families.qwen2 import Qwen2ForCausalLM
from mstar.models.layers.blocks import RotaryEmbedding, rope_parameters
from mstar.models.vision.base import VisionLanguageModel, VisionLanguageParts
from mstar.models.vision.inputs import ImageInput


class Qwen2_5_VLImagesProcessor(Qwen2_5_VLProcessor):
    """transformers' Qwen2.5-VL processor for text and images only: its video processor's class
    needs torchvision, which is not a dependency (its CUDA wheels break next to the CPU torch)."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class MRotaryEmbedding(RotaryEmbedding):
    """The rope table of ``RotaryEmbedding``; positions [3, tokens] pick, per frequency, the
    axis its ``mrope_section`` names. 1-D positions (text only) are plain rope."""

    def __init__(self, head_dim: int, max_positions: int, rope: dict) -> None:
        super().__init__(head_dim, max_positions, rope)
        section = rope["mrope_section"]
        if sum(section) != head_dim // 2:
            raise ValueError(f"mrope_section {section} must sum to head_dim/2 = {head_dim // 2}")
        self.section = section
        self.register_buffer("axis_of_column", torch.empty(0, dtype=torch.int64),
                             persistent=False)

    def init_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        super().init_cache(device, dtype)
        axis = torch.cat([torch.full((n,), i % 3) for i, n in enumerate(self.section)])
        # The table's columns are [cos, cos, -sin, sin], each a half head wide.
        self.axis_of_column = axis.repeat(4).to(device)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 1:
            return super().forward(positions)
        table = self.cos_sin[positions]  # [3, tokens, columns]
        index = self.axis_of_column.expand(1, table.shape[1], -1)
        cos, sin = table.gather(0, index)[0].unsqueeze(1).chunk(2, dim=-1)
        return cos, sin


class Qwen2_5_VLForConditionalGeneration(VisionLanguageModel):
    unpacked_prefixes = ("model.visual.",)
    text_model_cls = Qwen2ForCausalLM
    checkpoint_prefixes = (  # the original layout (Qwen's own checkpoints)
        ("model.layers.", "model.language_model.layers."),
        ("model.embed_tokens.", "model.language_model.embed_tokens."),
        ("model.norm.", "model.language_model.norm."),
        ("visual.", "model.visual."),
    )

    def __init__(self, config) -> None:
        super().__init__(config)
        text = self.build_text_model()
        head_dim = text.layers[0].self_attn.head_dim
        text.rotary_emb = MRotaryEmbedding(head_dim, self.text_config.max_position_embeddings,
                                           rope_parameters(self.text_config))
        visual = Qwen2_5_VisionTransformerPretrainedModel._from_config(config.vision_config)
        self.model = VisionLanguageParts("language_model", text, visual=visual)
        self.merge_size = config.vision_config.spatial_merge_size

    def init_buffers(self, device: torch.device) -> None:
        """The tower's rope frequencies: non-persistent buffers, not in the checkpoint."""
        rope = self.model.visual.rotary_pos_emb
        inv_freq, _ = rope.compute_axial_rope_parameters(rope.config)
        rope.inv_freq = inv_freq.to(device)
        rope.original_inv_freq = inv_freq.clone().to(device)

    def encode(self, image: dict[str, torch.Tensor]) -> torch.Tensor:
        """``pixel_values`` [patches, channels x temporal x patch x patch], ``image_grid_thw``
        [1, 3]."""
        pixels = image["pixel_values"].to(self.model.embed_tokens.weight.dtype)
        return self.model.visual(pixels, grid_thw=image["image_grid_thw"]).pooler_output

    def rope_positions(self, prompt_ids: Sequence[int],
                       images: Sequence[ImageInput]) -> tuple[torch.Tensor, int]:
        """The prompt's M-RoPE positions [3, len(prompt_ids)], and ``delta``: a later token at
        index i has position i + delta on every axis."""
        n = len(prompt_ids)
        positions = torch.empty(3, n, dtype=torch.int64)
        next_pos, text_from = 0, 0
        for image in images:
            text_len = image.offset - text_from
            positions[:, text_from:image.offset] = torch.arange(text_len) + next_pos
            next_pos += text_len
            t, h, w = (int(x) for x in image.tensors["image_grid_thw"][0])
            h, w = h // self.merge_size, w // self.merge_size
            grid = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
            positions[:, image.offset:image.end] = torch.stack(grid).reshape(3, -1) + next_pos
            next_pos += max(h, w)
            text_from = image.end
        positions[:, text_from:] = torch.arange(n - text_from) + next_pos
        return positions, next_pos - text_from
