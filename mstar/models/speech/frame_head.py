"""The runner's frame head for a speech model (CSM): what turns the engine's one-token step loop
into a frame loop, with no change to the scheduler's rows.

A speech request's token stream is its prompt's text tokens, then one position per frame (the
token there is the frame's code 0, which the sampler picks from ``lm_head``). This head keeps each
live request's frames (those it came in with after a preemption, then each one made), and per step

- ``embeds``: the step's input embeddings, a text token's row for a prompt position and the sum
  of its codes' embeddings for a frame position (``CsmBackbone.embed_frames``): the runner passes
  them as ``inputs_embeds``;
- ``after_sample``: the depth decoder, fed the sampled rows' last hidden states and code 0, makes
  codes 1..K-1 of each sampled row's frame (``csm_frames.depth_codes``: the same batched loop the
  offline ``CsmFrames`` runs). The frames go back in ``RunnerOutput.frames``, by request number.

It reads the runner's step values (``SchedulerOutput``: ``rows``, ``new``, ``removed``) as given;
it runs on the runner's thread only. The depth decoder is transformers' module, loaded from the
checkpoint's ``depth_decoder.*`` tensors (it keeps nothing between frames: its cache is at most
K positions and starts empty each frame, docs/speech.rst).
"""

from __future__ import annotations

import torch

from mstar.models.speech.checkpoint import tensors_under
from mstar.models.speech.csm_backbone import AUDIO_EMBED, DEPTH_PREFIX, TIED_AUDIO_EMBED
from mstar.models.speech.csm_frames import depth_codes
from mstar.models.speech.frame_book import FrameBook


def load_depth_decoder(model_dir, hf_config, device: torch.device, dtype: torch.dtype):
    """transformers' ``CsmDepthDecoderForCausalLM`` with the checkpoint's weights."""
    from transformers import CsmDepthDecoderForCausalLM

    depth = CsmDepthDecoderForCausalLM(hf_config.depth_decoder_config)
    state = tensors_under(model_dir, DEPTH_PREFIX)
    embed = TIED_AUDIO_EMBED.removeprefix(DEPTH_PREFIX)
    if embed not in state:  # tied, and saved under the backbone's name
        state[embed] = tensors_under(model_dir, AUDIO_EMBED)[""]
    depth.load_state_dict(state)
    return depth.to(device=device, dtype=dtype).eval().requires_grad_(False)


class FrameHead(FrameBook):
    def __init__(self, model, model_dir, hf_config, device: torch.device,
                 dtype: torch.dtype) -> None:
        super().__init__(model, device, hf_config.codebook_eos_token_id)  # a CsmBackbone
        self.codebooks = hf_config.num_codebooks
        self.depth = load_depth_decoder(model_dir, hf_config, device, dtype)

    def embeds(self, out, input_ids: torch.Tensor) -> torch.Tensor:
        """The step's input embeddings, in the step's token order."""
        text_rows, frame_rows, frames, first = [], [], [], 0
        for row in out.rows:
            prompt, made = self.prompt_len[row.seq_no], self.frames[row.seq_no]
            cut = min(max(row.start, prompt), row.end)  # its first frame position
            text_rows += range(first, first + cut - row.start)
            frame_rows += range(first + cut - row.start, first + row.num_tokens)
            frames += made[cut - prompt:row.end - prompt]
            first += row.num_tokens
        embed = self.model.model.embed_tokens
        out_embeds = torch.empty(first, embed.embedding_dim, dtype=embed.weight.dtype,
                                 device=self.device)
        if text_rows:
            rows = torch.tensor(text_rows, device=self.device)
            out_embeds[rows] = embed(input_ids[rows])
        if frame_rows:
            codes = torch.tensor(frames, dtype=torch.int64, device=self.device)
            out_embeds[torch.tensor(frame_rows, device=self.device)] = \
                self.model.embed_frames(codes)
        return out_embeds

    def after_sample(self, out, hidden: torch.Tensor, code0: list[int]) -> dict[int, list[int]]:
        """Each sampled row's frame (``hidden``: the sampled rows' last hidden states, ``code0``
        their sampled tokens, in row order), kept as the request's next input and returned."""
        seq_nos = [row.seq_no for row in out.rows if row.samples]
        first = torch.tensor(code0, dtype=torch.int64, device=self.device)
        made = depth_codes(self.depth, hidden, first, self.codebooks).tolist()
        for seq_no, frame in zip(seq_nos, made, strict=True):
            self.frames[seq_no].append(frame)
        return dict(zip(seq_nos, made, strict=True))
