"""The runner's frame head for Qwen3-Omni's talker (``omni_talker_model.OmniTalker``): what CSM's
``frame_head.FrameHead`` is for its backbone, with the talker's inputs and its end rule.

A talker request's prompt is ``T`` placeholder positions whose inputs are its feed's prefill rows
(``row_feed.RowFeed``); then one position per frame. Position ``T + j`` holds frame ``j`` (its
token is the frame's code 0, sampled from the talker's head) and its input is the frame's
embedding (``omni_code_predictor.frame_embeds``) plus the feed's row ``j``, as the offline loop
(``omni_talker.TalkerFrames``) adds them. Per step

- ``embeds``: each position's input, in the step's token order;
- ``after_sample``: the code predictor, fed the sampled rows' last hidden states and code 0,
  makes codes 1..K-1 (``omni_code_predictor.residual_codes``, batched). A row whose code 0 is
  the codec's end id makes no frame: its request ends there (``TalkerStop``), and the frame head
  keeps a stand-in so that a continuation row scheduled behind it (dropped with the request)
  still has an input.

The code predictor is transformers' module, loaded from the checkpoint's
``talker.code_predictor.*`` tensors; it runs on the runner's thread only.
"""

from __future__ import annotations

import torch

from mstar.models.speech.checkpoint import tensors_under
from mstar.models.speech.frame_book import FrameBook
from mstar.models.speech.frame_stop import FrameStop
from mstar.models.speech.omni_code_predictor import frame_embeds, residual_codes
from mstar.models.speech.omni_talker import TALKER_PREFIX

PREDICTOR_PREFIX = TALKER_PREFIX + "code_predictor."


def load_code_predictor(model_dir, talker_config, device: torch.device, dtype: torch.dtype):
    """transformers' ``Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration`` with the
    checkpoint's weights."""
    from transformers.initialization import no_init_weights
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
        Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration as CodePredictor,
    )

    with no_init_weights():  # every weight is loaded below
        predictor = CodePredictor._from_config(talker_config.code_predictor_config)
    predictor.load_state_dict(tensors_under(model_dir, PREDICTOR_PREFIX))
    return predictor.to(device=device, dtype=dtype).eval().requires_grad_(False)


class TalkerStop(FrameStop):
    """A talker request ends when code 0 is the codec's end id (that token makes no frame), or
    at ``max_tokens`` frames."""

    def reason(self, seq, token: int) -> str | None:
        if token == self.end_code:
            return "stop"
        return "length" if seq.num_output_tokens >= seq.params.max_tokens else None


class TalkerHead(FrameBook):
    STOP = TalkerStop

    def __init__(self, model, model_dir, hf_config, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__(model, device, hf_config.codec_eos_token_id)  # an OmniTalker
        self.groups = hf_config.num_code_groups
        self.predictor = load_code_predictor(model_dir, hf_config, device, dtype)
        self.feeds: dict = {}  # request number -> its RowFeed

    def take(self, req) -> None:
        if req.feed is None:
            raise ValueError("a talker request carries its embedding rows (a RowFeed)")
        self.feeds[req.seq_no] = req.feed

    def forget(self, seq_no: int) -> None:
        self.feeds.pop(seq_no, None)

    def embeds(self, out, input_ids: torch.Tensor) -> torch.Tensor:
        """The step's input embeddings, in the step's token order."""
        parts, frames, texts = [], [], []  # parts: ("prompt", rows) or ("frames", count)
        for row in out.rows:
            prompt, feed = self.prompt_len[row.seq_no], self.feeds[row.seq_no]
            cut = min(max(row.start, prompt), row.end)  # its first frame position
            if cut > row.start:
                parts.append(("prompt", feed.prompt[row.start:cut]))
            if row.end > cut:
                steps = range(cut - prompt, row.end - prompt)
                frames += self.frames[row.seq_no][steps.start:steps.stop]
                texts += [feed.row(j) for j in steps]
                parts.append(("frames", len(steps)))
        made = iter(())
        if frames:
            codes = torch.tensor(frames, dtype=torch.int64, device=self.device)
            rows = frame_embeds(self.predictor, self.model.model.embed_tokens, codes)
            made = iter((rows + torch.stack(texts).to(rows)).split(
                [n for kind, n in parts if kind == "frames"]))
        dtype = self.model.model.embed_tokens.weight.dtype
        return torch.cat([part.to(self.device, dtype) if kind == "prompt" else next(made)
                          for kind, part in parts])

    def after_sample(self, out, hidden: torch.Tensor, code0: list[int]) -> dict[int, list[int]]:
        """Each sampled row's frame (``hidden``: the sampled rows' last hidden states, ``code0``
        their sampled tokens, in row order), kept as the request's next input and returned; an
        end code's row returns none."""
        seq_nos = [row.seq_no for row in out.rows if row.samples]
        first = torch.tensor(code0, dtype=torch.int64, device=self.device)
        made = residual_codes(self.predictor, self.model.model.embed_tokens, self.groups, hidden,
                              first).tolist()
        frames = {}
        for seq_no, frame in zip(seq_nos, made, strict=True):
            self.frames[seq_no].append(frame)  # an end row's: a stand-in, never an input read
            if frame[0] != self.end_code:
                frames[seq_no] = frame
        return frames
