"""The kinds of node and edge a walk graph is made of."""

from __future__ import annotations

import enum


class NodeKind(enum.Enum):
    ENCODER = "encoder"  # stateless: same input, same output tensor (so outputs can be cached)
    LANGUAGE_MODEL = "language_model"  # keeps per-request state in its own paged KV cache
    # After a language model: codec frames in, waveform samples out. Stateless, or holding per
    # request at most its incoming edge's window (``ChunkPolicy.held_frames``).
    CODEC = "codec"


class EdgeKind(enum.Enum):
    # The source's rows replace the target's token embeddings at the part's placeholder positions
    # (vision models, Qwen2-Audio, Voxtral).
    PLACEHOLDER_EMBEDDINGS = "placeholder_embeddings"
    # The source's output is the target's cross-attention memory for the request's life (Whisper).
    CROSS_ATTENTION = "cross_attention"
    # The source's output flows on while the source still runs, cut by the edge's chunk policy
    # (thinker tokens to the talker; codec frames to the codec).
    STREAM = "stream"
