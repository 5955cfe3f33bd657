"""CSM's backbone as an mstar model: the llama family over the paged KV cache, with a weight
rename (transformers' ``CsmBackboneModel`` is its ``LlamaModel``).

Two embeddings feed it: a prompt's text tokens go through ``embed_text_tokens`` (here
``model.embed_tokens``, so the family's token lookup is the text one), and a frame of
``num_codebooks`` Mimi codes is the sum of its codes' rows in ``embed_audio_tokens`` (code ``i``
at row ``i * codebook_size + code``). ``lm_head`` picks code 0. The runner's frame head
(``mstar.models.speech.frame_head``) says which positions are frames and hands the step's
embeddings in as ``inputs_embeds``; the depth decoder and Mimi are not part of this module (the
frame head and the codec node load them), so the loader's linear packing never touches them.
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.llama import LlamaForCausalLM

BACKBONE_PREFIX = "backbone_model."
# Not run by this module: the frame head loads the depth decoder, the codec node Mimi.
DEPTH_PREFIX, CODEC_PREFIX = "depth_decoder.", "codec_model."
AUDIO_EMBED = "backbone_model.embed_tokens.embed_audio_tokens.weight"
# The depth decoder's code embedding is the backbone's one when the codebook embeddings are
# tied (transformers then saves it once, under this name).
TIED_AUDIO_EMBED = "depth_decoder.model.embed_tokens.weight"


class CsmBackbone(LlamaForCausalLM):
    unused_checkpoint_prefixes = (DEPTH_PREFIX, CODEC_PREFIX)

    def __init__(self, config) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        # CsmConfig's tie_word_embeddings ties the codebook embeddings, not lm_head: untie it.
        self.tie_word_embeddings = False
        self.lm_head = nn.Linear(hidden, config.vocab_size, bias=False)
        self.model.embed_tokens = nn.Embedding(config.text_vocab_size, hidden)
        self.codebooks, self.codebook_size = config.num_codebooks, config.vocab_size
        self.embed_audio_tokens = nn.Embedding(self.codebooks * self.codebook_size, hidden)
        self.tied_codebooks = bool(getattr(config, "tie_codebooks_embeddings", True))

    def checkpoint_name(self, stored: str) -> str:
        """transformers' CSM names -> this module's (the loader calls it on every tensor)."""
        if stored == AUDIO_EMBED or (stored == TIED_AUDIO_EMBED and self.tied_codebooks):
            return "embed_audio_tokens.weight"
        if stored == "embed_text_tokens.weight":
            return "model.embed_tokens.weight"
        if stored.startswith(BACKBONE_PREFIX):
            return "model." + stored.removeprefix(BACKBONE_PREFIX)
        return stored

    def embed_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """[rows, codebooks] codes -> [rows, hidden]: the sum of each code's embedding."""
        offsets = torch.arange(self.codebooks, device=frames.device) * self.codebook_size
        return self.embed_audio_tokens(frames + offsets).sum(dim=1)

    def forward(self, input_ids, positions, attn_metadata, inputs_embeds=None) -> torch.Tensor:
        return self.model(input_ids, positions, attn_metadata, inputs_embeds=inputs_embeds)
