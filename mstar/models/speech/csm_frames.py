"""CSM's frame loop, greedy, as ``CsmForConditionalGeneration.generate`` makes it.

One frame is ``num_codebooks`` Mimi codes. Per frame:

1. the backbone (a Llama-shaped decoder with its KV cache) reads the previous frame, whose input
   embedding is the sum of its codes' embeddings (the prompt's text tokens before that), and its
   ``lm_head`` picks code 0;
2. the depth decoder, the backbone node's per-frame head, starts a fresh short cache from the
   backbone's last hidden state and code 0 and picks codes 1..K-1, one step each, code ``i``
   read through the ``i``-th codebook's head.

The loop ends after the frame whose codes (all but the last) are the codebook end id, or at
``max_frames``, as transformers ends it. The compute modules are transformers' own (the backbone,
the depth decoder, the heads); the loop, the stop rule and the frame embedding are here, so they
can move into the engine's step loop as they stand (docs/speech.rst: what is left).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers import DynamicCache


class CsmFrames:
    def __init__(self, model) -> None:
        self.model = model  # a CsmForConditionalGeneration, float32, eval
        config = model.config
        self.codebooks = config.num_codebooks
        self.end_code = config.codebook_eos_token_id

    def ends(self, frame: torch.Tensor) -> bool:
        return frame_ends(frame.tolist(), self.end_code)

    @torch.inference_mode()
    def frames(self, prompt_ids: list[int], max_frames: int) -> Iterator[torch.Tensor]:
        """Each frame (``[num_codebooks]`` codes) as it is made; the last may be the end frame."""
        cache = DynamicCache(config=self.model.config)
        embeds = self.model.embed_text_tokens(torch.tensor([prompt_ids]))
        for _ in range(max_frames):
            hidden = self._backbone(embeds, cache)
            frame = self._depth(hidden)
            yield frame
            if self.ends(frame):
                return
            embeds = self.model.backbone_model.embed_tokens(frame.view(1, 1, -1))

    def _backbone(self, embeds: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """The backbone's last hidden state after ``embeds`` (its cache grows by them)."""
        out = self.model.backbone_model(inputs_embeds=embeds, cache=cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def _depth(self, hidden: torch.Tensor) -> torch.Tensor:
        """Code 0 from the backbone's head, then codes 1..K-1 from the depth decoder."""
        first = self.model.lm_head(hidden).argmax(-1)
        return depth_codes(self.model.depth_decoder, hidden, first, self.codebooks)[0]


def frame_ends(frame: list[int], end_code: int) -> bool:
    """transformers' stop rule: every code but the last is the end code (the engine's finish
    rule for a speech request too)."""
    return all(code == end_code for code in frame[:-1])


@torch.inference_mode()
def depth_codes(depth, hidden: torch.Tensor, first: torch.Tensor, codebooks: int) -> torch.Tensor:
    """The depth decoder's greedy codes 1..K-1 for a batch of rows: ``hidden`` [rows, H] (the
    backbone's last hidden states), ``first`` [rows] (code 0 of each). Returns [rows, K]. Every
    row runs the same K-1 steps, so the batch needs no padding; the cache starts empty."""
    codes = [first]
    cache = DynamicCache(config=depth.config)
    # position 0 is the backbone's hidden state (its token id is ignored), position 1 code 0
    step = torch.stack([torch.zeros_like(first), first], dim=1)
    context = {"backbone_last_hidden_state": hidden}
    while len(codes) < codebooks:
        logits = depth(input_ids=step, cache=cache, use_cache=True, logits_to_keep=1,
                       **context).logits
        codes.append(logits[:, -1].argmax(-1))
        step, context = codes[-1][:, None], {}
    return torch.stack(codes, dim=1)


def audible(frames: list[torch.Tensor], end_code: int) -> list[torch.Tensor]:
    """The frames before the first one made only of end codes (transformers cuts there before
    decoding audio)."""
    cut = next((i for i, f in enumerate(frames) if bool((f == end_code).all())), len(frames))
    return frames[:cut]
