"""What every vision-language model shares: a paged text decoder (an mstar family) whose input
embeddings take image rows at the placeholder positions, and a stateless image encoder.

The engine calls the graph's encoder node (``encoder_nodes``: ``vision_encoder`` -> ``encode``)
once per image (its output is cached by content hash), ``embed`` for the step's token ids,
``merge`` to put the image rows in, then ``forward(..., inputs_embeds=)``. The walk graph and
the features the engine provides (bidirectional image attention, M-RoPE position tables) are the
architecture's registry entry (``mstar.models.loading.registry``), declared there once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from mstar.models.families.llama import LlamaForCausalLM, fused_shard_range
from mstar.models.loading.registry import model_entry

# The original LLaVA-style layout (llava-hf's and Google's Gemma 3 checkpoints, transformers'
# save_pretrained) -> this package's module names.
LLAVA_CHECKPOINT_PREFIXES = (
    ("language_model.model.", "model.language_model."),
    ("language_model.lm_head.", "lm_head."),
    ("vision_tower.vision_model.", "model.vision_tower."),
    ("vision_tower.", "model.vision_tower."),
    ("multi_modal_projector.", "model.multi_modal_projector."),
)


def init_position_ids(tower: nn.Module, device: torch.device) -> None:
    """A transformers tower's position ids: non-persistent buffers, not in the checkpoint."""
    for module in tower.modules():
        ids = module._buffers.get("position_ids")
        if ids is not None:
            module.position_ids = torch.arange(ids.shape[-1], device=device).expand(ids.shape)


class VisionLanguageParts(nn.Module):
    """The checkpoint's ``model.*`` modules; the text decoder's pieces the engine looks for
    (``embed_tokens``, ``layers``, ``rotary_emb``) are forwarded from it."""

    def __init__(self, text_name: str, text_model: nn.Module, **vision: nn.Module) -> None:
        super().__init__()
        self.text_name = text_name
        self.add_module(text_name, text_model)
        for name, module in vision.items():
            self.add_module(name, module)

    @property
    def text(self) -> nn.Module:
        return getattr(self, self.text_name)

    @property
    def embed_tokens(self) -> nn.Module:
        return self.text.embed_tokens

    @property
    def layers(self) -> nn.ModuleList:
        return self.text.layers

    @property
    def rotary_emb(self) -> nn.Module:
        return self.text.rotary_emb


class VisionLanguageModel(nn.Module):
    """Subclasses build ``self.model`` (a VisionLanguageParts) and implement ``encode``; the
    audio-in families (``mstar.models.audio``) share it, their registry entries' graphs naming
    an audio encoder node."""

    packed_modules = LlamaForCausalLM.packed_modules
    unused_checkpoint_prefixes: tuple[str, ...] = ()
    unpacked_prefixes: tuple[str, ...] = ()  # the vision tower keeps its checkpoint layout
    text_model_cls: type = LlamaForCausalLM

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.text_config = config.get_text_config()
        self.lm_head = nn.Linear(self.text_config.hidden_size, self.text_config.vocab_size,
                                 bias=False)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        self.softcap = getattr(self.text_config, "final_logit_softcapping", None)

    # (checkpoint prefix, model prefix), first match wins: older layouts name modules otherwise.
    checkpoint_prefixes: tuple[tuple[str, str], ...] = ()

    def checkpoint_name(self, name: str) -> str:
        for old, new in self.checkpoint_prefixes:
            if name.startswith(old):
                return new + name[len(old):]
        return name

    def build_text_model(self) -> nn.Module:
        return self.text_model_cls(self.text_config).build_model(self.text_config)

    def shard_range(self, packed: str, shard: int) -> tuple[int, int]:
        return fused_shard_range(self.model, self.text_config.intermediate_size,
                                 packed, shard)

    def encode(self, image: dict[str, torch.Tensor]) -> torch.Tensor:
        """One part's processor tensors -> its embedding rows [placeholder tokens, hidden]."""
        raise NotImplementedError

    def encoder_nodes(self) -> dict[str, Callable[[dict], torch.Tensor]]:
        """The walk graph's encoder node (the registry entry's graph has one) -> the call that
        runs it (the runner asks once)."""
        (node,) = model_entry(self.config).graph.encoders
        return {node.name: self.encode}

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.text.embed(input_ids)

    @staticmethod
    def merge(embeds: torch.Tensor, rows: torch.Tensor, image_rows: torch.Tensor) -> torch.Tensor:
        """Token embeddings with ``image_rows`` written at flattened rows ``rows``."""
        return embeds.index_copy(0, rows, image_rows.to(embeds.dtype))

    def forward(self, input_ids, positions, attn_metadata, inputs_embeds=None) -> torch.Tensor:
        return self.model.text(input_ids, positions, attn_metadata, inputs_embeds)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
