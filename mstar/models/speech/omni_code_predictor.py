"""Qwen3-Omni's code predictor: the talker's per-frame head, as CSM's depth decoder is the
backbone's (docs/speech.rst says why a head and not a node: it keeps nothing from one frame to
the next, and runs a fixed K-1 steps right after each talker step, for the same row).

A frame is ``K = num_code_groups`` codes. The talker's ``codec_head`` picks code 0; then the code
predictor, a small decoder whose short cache starts empty every frame, reads the talker's last
hidden state (after its final norm) and code 0's embedding (the talker's ``codec_embedding``),
and picks code ``i`` (1..K-1) through its ``lm_head[i-1]``, reading code ``i``'s embedding
through its ``codec_embedding[i-1]`` on the next step. The frame then goes back into the talker
as the sum of its K codes' embeddings (``frame_embeds``), to which the talker adds that step's
text (``mstar.models.speech.omni_talker``). Greedy; rows batch with no padding (every row runs
the same steps), as ``csm_frames.depth_codes``.
"""

from __future__ import annotations

import torch


@torch.inference_mode()
def residual_codes(predictor, codec_embedding, groups: int, hidden: torch.Tensor,
                   first: torch.Tensor) -> torch.Tensor:
    """The frames of a batch of rows: ``hidden`` [rows, H] (the talker's last hidden states),
    ``first`` [rows] (code 0 of each). Returns [rows, K], ``K = groups`` (the talker config's
    ``num_code_groups``). ``predictor``: transformers'
    ``Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration``; ``codec_embedding``: the
    talker's code embedding (transformers' ``model.codec_embedding``, the engine model's token
    embedding)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=predictor.config)
    codes = [first]
    embeds = torch.stack([hidden, codec_embedding(first)], dim=1)
    for step in range(groups - 1):
        out = predictor.model(inputs_embeds=embeds, cache=cache, use_cache=True)
        codes.append(predictor.lm_head[step](out.last_hidden_state[:, -1]).argmax(-1))
        embeds = predictor.model.codec_embedding[step](codes[-1])[:, None]
    return torch.stack(codes, dim=1)


def frame_embeds(predictor, codec_embedding, frames: torch.Tensor) -> torch.Tensor:
    """[rows, K] codes -> [rows, H]: code 0's talker embedding plus code ``i``'s code predictor
    embedding ``codec_embedding[i-1]``, summed in transformers' order (one ``sum`` over the K
    rows stacked, so the float rounding is its own)."""
    embed = predictor.model.codec_embedding
    parts = [codec_embedding(frames[:, 0])]
    parts += [embed[i - 1](frames[:, i]) for i in range(1, frames.shape[1])]
    return torch.stack(parts, dim=1).sum(1)
