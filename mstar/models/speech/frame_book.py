"""What every speech model's frame head keeps (CSM's ``frame_head.FrameHead``, Qwen3-Omni's
``omni_talker_head.TalkerHead``): each live request's frames and prompt length by request
number, updated from the step's diffs as the persistent batch takes them, and the model's finish
rule. The heads differ in their inputs and their frame predictor; this is the part they share.
"""

from __future__ import annotations

import torch

from mstar.models.speech.frame_stop import FrameStop


class FrameBook:
    STOP: type[FrameStop] = FrameStop  # the model's finish rule

    def __init__(self, model, device: torch.device, end_code: int) -> None:
        self.model = model
        self.device = device
        self.end_code = end_code
        self.frames: dict[int, list[list[int]]] = {}  # request number -> its frames so far
        self.prompt_len: dict[int, int] = {}

    def stop(self, speculating: bool) -> FrameStop:
        """The engine's finish rule for this model's requests."""
        return self.STOP(self.end_code, speculating)

    def apply(self, out) -> None:
        """The step's diffs, as the persistent batch takes them: removed first, then new."""
        for seq_no in out.removed:
            self.frames.pop(seq_no, None)
            self.prompt_len.pop(seq_no, None)
            self.forget(seq_no)
        for req in out.new:
            self.take(req)
            self.frames[req.seq_no] = list(req.frames)  # the frames themselves are never changed
            self.prompt_len[req.seq_no] = req.num_prompt_tokens

    def take(self, req) -> None:
        """A head's own state of a new request (none here)."""

    def forget(self, seq_no: int) -> None:
        """A head's own state of a removed request (none here)."""
