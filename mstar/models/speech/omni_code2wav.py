"""Qwen3-Omni's code2wav as mstar's codec node: the talker's frames (``[frames, code groups]``
codes, one frame a talker step) stream in along the graph's ``codes`` edge and come out as 24 kHz
samples, window by window (``mstar.graph.speech.QWEN3_OMNI``: ``OMNI_CHUNK_FRAMES`` new frames
after ``OMNI_LEFT_CONTEXT`` frames of left context, transformers' ``chunked_decode`` numbers).

The decoder is **transformers' module** (``Qwen3OmniMoeCode2Wav``: a sliding-window transformer,
then causal transposed convolutions), built from the model's ``code2wav_config`` and given the
checkpoint's ``code2wav.*`` tensors alone: the thinker and the talker are never built or read
(writing mstar's own decoder is left; it runs once per window, far less often than the talker
steps).

What a window keeps: a window of ``n`` frames decodes to ``n * samples_per_frame`` samples less
a few the transposed convolutions cut at the end (one upsampling stride each: 6 samples on the
tiny test model); the first ``context`` frames' samples are dropped as ``CodecStream`` drops them.
transformers' ``chunked_decode`` cuts the same, so the joined chunks are its waveform, and that,
not one whole decode (which loses the end samples once, and whose attention reaches up to
``sliding_window`` frames back, further than the left context), is the reference.
"""

from __future__ import annotations

import numpy as np
import torch

from mstar.graph.chunks import ChunkPolicy
from mstar.graph.speech import QWEN3_OMNI, TALKER
from mstar.models.speech.checkpoint import tensors_under
from mstar.models.speech.codec_node import CodecNode, CodecStream

CODE2WAV_PREFIX = "code2wav."  # the checkpoint's names for code2wav's tensors
SAMPLE_RATE = 24_000  # Qwen3-Omni's output rate (its config does not carry it)


def load_code2wav(model_dir, device: torch.device | None = None,
                  dtype: torch.dtype = torch.float32):
    """transformers' ``Qwen3OmniMoeCode2Wav`` with the checkpoint's ``code2wav.*`` tensors (the
    config is read whole: it is small; no other part's weights are touched)."""
    from transformers import AutoConfig, Qwen3OmniMoeCode2Wav
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(model_dir).code2wav_config
    with no_init_weights():  # every weight is loaded below
        module = Qwen3OmniMoeCode2Wav(config)
    module.load_state_dict(tensors_under(model_dir, CODE2WAV_PREFIX))
    return module.to(device=device, dtype=dtype).eval().requires_grad_(False)


class Code2Wav:
    def __init__(self, module, chunk: ChunkPolicy = QWEN3_OMNI.edge_from(TALKER).chunk) -> None:
        """``module``: a loaded ``Qwen3OmniMoeCode2Wav``; ``chunk``: the ``codes`` edge's
        windows (the graph's; another policy only where a test or a serving choice asks)."""
        self.module = module
        self.chunk = chunk
        self.samples_per_frame = int(module.total_upsample)
        self.sample_rate = SAMPLE_RATE

    @classmethod
    def load(cls, model_dir, device: torch.device | None = None,
             dtype: torch.dtype = torch.float32,
             chunk: ChunkPolicy = QWEN3_OMNI.edge_from(TALKER).chunk) -> Code2Wav:
        return cls(load_code2wav(model_dir, device, dtype), chunk)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> np.ndarray:
        """``[frames, code groups]`` codes -> mono float32 samples (the codec node's
        ``Decode``); the module takes ``[batch, code groups, frames]``."""
        param = next(self.module.parameters())
        audio = self.module(codes.T.unsqueeze(0).to(param.device))
        return audio[0, 0].float().cpu().numpy()

    def stream(self) -> CodecStream:
        """One request's codec node state: frames in (``push``, ``finish``), chunks out."""
        return CodecStream(self.decode, self.chunk, self.samples_per_frame)

    def codec_node(self) -> CodecNode:
        """The codec node serving requests by id (the chained walk's)."""
        return CodecNode(self.stream, self.sample_rate)
