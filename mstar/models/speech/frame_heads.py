"""Each speech model's per-frame head, by model class: the one place that says which head turns
a speech model's one-token steps into frames (the runner makes it when the graph has a codec)."""

from __future__ import annotations

import torch

from mstar.models.speech.csm_backbone import CsmBackbone
from mstar.models.speech.frame_head import FrameHead
from mstar.models.speech.omni_talker_head import TalkerHead
from mstar.models.speech.omni_talker_model import OmniTalker

HEADS = {CsmBackbone: FrameHead, OmniTalker: TalkerHead}  # CSM's depth decoder, the code predictor


def frame_head(model, model_dir, hf_config, device: torch.device, dtype: torch.dtype):
    """``model``'s frame head; a ValueError for a model with none."""
    head = HEADS.get(type(model))
    if head is None:
        raise ValueError(f"{type(model).__name__} has a codec node but no frame head")
    return head(model, model_dir, hf_config, device, dtype)
