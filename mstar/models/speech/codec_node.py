"""A codec node's work for one request: frames stream in along an edge with a chunk policy
(``mstar.graph.chunks``), and each window that is ready is decoded and its new samples go out.

The state is bounded: the frames the next window may still need (its left context and the frames
not yet sent), never the whole utterance. ``decode`` maps ``[frames, codebooks]`` codes to mono
samples, ``samples_per_frame`` per frame (Mimi's ``frame_size``); a window's first ``context``
frames are decoded again only so its own samples continue the last chunk's, and are dropped.

``CodecNode`` is the node itself, with one ``CodecStream`` per live request by request id: the
seam the worker's speech out and the chained walk call (``take_all``: a step's requests with new
frames at once; ``forget``). The same seam over the transport, to the node in a process of its
own, is ``mstar.worker.codec_node``'s: one message per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np
import torch

from mstar.graph.chunks import ChunkPolicy, Window

Decode = Callable[[torch.Tensor], np.ndarray]
Sounded = Callable[[torch.Tensor], bool]  # whether a frame is decoded (CSM: not an end frame)
# One request's part of a step: its id, its new frames (codes, one list per frame), and whether
# the frames' source finished (the leftover then goes too, and the request's state is freed).
Frames = tuple[str, list[list[int]], bool]


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


class CodecSeam(Protocol):
    """A codec node as its callers see it, in this process (``CodecNode``) or apart."""

    sample_rate: int

    @property
    def held(self) -> int:
        """Requests whose codec state the node holds."""

    def take_all(self, requests: list[Frames]) -> list[list[np.ndarray]]:
        """The audio chunks each request's new frames made ready, in the requests' order."""

    def forget(self, request_ids: Iterable[str]) -> None:
        """Aborted requests: their state is freed, nothing more is decoded for them."""

    def close(self) -> None:
        """Release what the node holds (a process of its own is stopped)."""


class CodecNode:
    def __init__(self, stream: Callable[[], CodecStream], sample_rate: int,
                 sounded: Sounded = lambda frame: True) -> None:
        """``stream``: a new request's state; ``sounded``: the frames that are decoded."""
        self.stream = stream
        self.sample_rate = sample_rate
        self.sounded = sounded
        self.streams: dict[str, CodecStream] = {}  # live requests with frames, by request id

    @property
    def held(self) -> int:
        return len(self.streams)

    def take_all(self, requests: list[Frames]) -> list[list[np.ndarray]]:
        return [self.take(*request) for request in requests]

    def take(self, request_id: str, frames: list[list[int]], last: bool) -> list[np.ndarray]:
        """One request's ``Frames``: the audio chunks they made ready."""
        stream = self.streams.get(request_id)
        if stream is None:  # the request's first frames
            stream = self.streams[request_id] = self.stream()
        chunks = []
        for frame in map(torch.tensor, frames):
            if self.sounded(frame):
                chunks += stream.push(frame)
        if last:
            del self.streams[request_id]
            chunks += stream.finish()
        return chunks

    def forget(self, request_ids: Iterable[str]) -> None:
        for rid in request_ids:
            self.streams.pop(rid, None)

    def close(self) -> None:
        self.streams.clear()


def mimi_decoder(codec_model) -> Decode:
    """transformers' Mimi decoder as a codec node's ``decode`` (writing mstar's own is left: the
    codec runs once per chunk, far less often than the language model steps)."""

    @torch.inference_mode()
    def decode(codes: torch.Tensor) -> np.ndarray:
        audio = codec_model.decode(codes.T.unsqueeze(0)).audio_values
        return audio[0, 0].float().numpy()

    return decode
