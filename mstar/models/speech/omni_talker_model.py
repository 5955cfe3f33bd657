"""Qwen3-Omni's talker as an mstar model: the Qwen3-MoE family over the paged KV cache, with a
rename, read from the checkpoint's ``talker.*`` tensors (the thinker, code2wav, the code predictor
and the two projections are not part of this module).

transformers' talker (``Qwen3OmniMoeTalkerForConditionalGeneration``) differs from Qwen3-MoE in
three ways, all here: its token embedding is ``model.codec_embedding`` and its head
``codec_head`` (renamed to ``model.embed_tokens`` and ``lm_head``); every layer's MLP is sparse,
with a shared expert scaled by a sigmoid gate (``SparseMoeBlock``'s shared expert); and its router
renormalises the top-k weights only as ``norm_topk_prob`` says (the released talker does not).
Code 0 may not take the codec's special ids but its end id (``omni_talker.barred_codes``):
``compute_logits`` bars them, as transformers' ``generate`` suppresses them.

Its inputs are embedding rows (``row_feed.RowFeed``), and the code predictor is its per-frame head
(``omni_talker_head.TalkerHead``), as CSM's depth decoder is its backbone's.
"""

from __future__ import annotations

import torch

from mstar.models.families.qwen3_moe import Qwen3MoeForCausalLM
from mstar.models.layers.moe import SparseMoeBlock
from mstar.models.speech.omni_talker import TALKER_PREFIX, barred_codes

CODE_EMBED, CODE_HEAD = "talker.model.codec_embedding.weight", "talker.codec_head.weight"
TALKER_DECODER = TALKER_PREFIX + "model."


class OmniTalker(Qwen3MoeForCausalLM):
    # After the rename: the thinker, code2wav, and the talker's parts this module does not run
    # (its code predictor, which the frame head loads; text_projection and hidden_projection,
    # which made the rows the request carries).
    unused_checkpoint_prefixes = ("thinker.", "code2wav.", TALKER_PREFIX)

    def __init__(self, config) -> None:
        """``config``: the model's ``talker_config`` (``Qwen3OmniMoeTalkerConfig``)."""
        text = config.text_config
        super().__init__(text)
        self.talker_config = config
        self.tie_word_embeddings = False  # codec_head is its own tensor
        for layer in self.model.layers:  # every talker layer is sparse, with a shared expert
            layer.mlp = SparseMoeBlock(text.hidden_size, text.moe_intermediate_size,
                                       text.num_experts, text.num_experts_per_tok,
                                       text.norm_topk_prob, text.shared_expert_intermediate_size)
        # a list, not a buffer: the loader builds modules without their buffers' values
        self.barred = barred_codes(config)

    def checkpoint_name(self, stored: str) -> str:
        """transformers' talker names -> this module's (the loader calls it on every tensor)."""
        if stored == CODE_EMBED:
            return "model.embed_tokens.weight"
        if stored == CODE_HEAD:
            return "lm_head.weight"
        if stored.startswith(TALKER_DECODER):
            return "model." + stored.removeprefix(TALKER_DECODER)
        return stored

    def forward(self, input_ids, positions, attn_metadata, inputs_embeds=None) -> torch.Tensor:
        return self.model(input_ids, positions, attn_metadata, inputs_embeds=inputs_embeds)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        logits[:, self.barred] = float("-inf")
        return logits
