"""``AudioInput``: one audio clip as the engine runs it, made from the decoded waveform by the
model's transformers feature extractor (in the API server, off the event loop).

Two edges consume it, as the model's walk graph declares:
- placeholder embeddings (Qwen2-Audio, Voxtral): the audio encoder's rows fill ``positions``;
- cross-attention states (Whisper): ``positions`` is empty, and the decoder attends to the
  encoder's output for the request's whole life.

Its content hash names its encoder output (the encoder cache) and enters the prompt's block hashes,
so two prompts with the same tokens and different audio never share KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads with the first clip: the API server starts without it
    import torch


@dataclass(frozen=True)
class AudioInput:
    content_hash: str  # of the feature extractor's output: same features, same encoder output
    tensors: dict[str, torch.Tensor]  # the encoder's input for this clip alone (input_features…)
    positions: tuple[int, ...] = ()  # placeholder positions its encoder rows fill; () for
    # cross-attention models
    seconds: float = 0.0  # the clip's length, for bounds and the real-time factor

    @property
    def offset(self) -> int:
        """First placeholder position (cross-attention clips have none: 0)."""
        return self.positions[0] if self.positions else 0

    @property
    def end(self) -> int:
        """One past the last placeholder position (0 for cross-attention clips)."""
        return self.positions[-1] + 1 if self.positions else 0

    @property
    def num_embeds(self) -> int:
        return len(self.positions)
