"""A codec node's work for one request: frames stream in along an edge with a chunk policy
(``mstar.graph.chunks``), and each window that is ready is decoded and its new samples go out.

The state is bounded: the frames the next window may still need (its left context and the frames
not yet sent), never the whole utterance. ``decode`` maps ``[frames, codebooks]`` codes to mono
samples, ``samples_per_frame`` per frame (Mimi's ``frame_size``); a window's first ``context``
frames are decoded again only so its own samples continue the last chunk's, and are dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from mstar.graph.chunks import ChunkPolicy, Window

Decode = Callable[[torch.Tensor], np.ndarray]


class CodecStream:
    def __init__(self, decode: Decode, policy: ChunkPolicy, samples_per_frame: int) -> None:
        self.decode = decode
        self.policy = policy
        self.samples_per_frame = samples_per_frame
        self.held: list[torch.Tensor] = []  # frames [first, first + len(held))
        self.first = 0
        self.sent = 0  # frames whose samples went out

    @property
    def available(self) -> int:
        return self.first + len(self.held)

    def push(self, frame: torch.Tensor) -> list[np.ndarray]:
        """Take one frame; the audio chunks that became ready."""
        self.held.append(frame)
        return self._send(finished=False)

    def finish(self) -> list[np.ndarray]:
        """The source's finish signal: the frames left over, as one shorter chunk."""
        return self._send(finished=True)

    def _send(self, finished: bool) -> list[np.ndarray]:
        chunks = [self._decode(w) for w in self.policy.windows(self.sent, self.available,
                                                                finished)]
        if chunks:
            self._forget()
        return chunks

    def _decode(self, window: Window) -> np.ndarray:
        codes = torch.stack(self.held[window.context_start - self.first:window.end - self.first])
        samples = self.decode(codes)
        self.sent = window.end
        return samples[window.context * self.samples_per_frame:]

    def _forget(self) -> None:
        """Drop the frames no later window reads (before the next one's left context)."""
        keep_from = max(self.first, self.sent - self.policy.left_context)
        del self.held[:keep_from - self.first]
        self.first = keep_from


def mimi_decoder(codec_model) -> Decode:
    """transformers' Mimi decoder as a codec node's ``decode`` (writing mstar's own is left: the
    codec runs once per chunk, far less often than the language model steps)."""

    @torch.inference_mode()
    def decode(codes: torch.Tensor) -> np.ndarray:
        audio = codec_model.decode(codes.T.unsqueeze(0)).audio_values
        return audio[0, 0].float().numpy()

    return decode
