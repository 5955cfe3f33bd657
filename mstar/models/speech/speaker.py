"""Offline speech out: ``Speaker(model_dir).speak("Hello")`` runs a CSM model's frame loop
(``csm_frames``) and streams its frames through a codec node (``codec_node``) cut by the chunk
policy of the model's walk graph (``mstar.graph.speech.CSM``), as the served route will.

This runs beside the engine, not in it: the backbone keeps a transformers cache, not mstar's
paged KV (docs/speech.rst says what is left to move it into the step loop)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mstar.graph.speech import BACKBONE, CSM
from mstar.models.speech.codec_node import CodecStream, mimi_decoder
from mstar.models.speech.csm_frames import CsmFrames

# Frames a request may make when it names no bound; Mimi makes 12.5 a second, so 30 s.
DEFAULT_MAX_FRAMES = 375


@dataclass
class Speech:
    audio: np.ndarray  # mono float32 samples at ``sample_rate``
    sample_rate: int
    codes: torch.Tensor  # [frames, codebooks], as transformers' generate returns them


class Speaker:
    """A CSM model (a local HF-format directory, or a loaded ``CsmForConditionalGeneration``)."""

    def __init__(self, model) -> None:
        from transformers import AutoTokenizer, CsmForConditionalGeneration

        self.tokenizer = None
        if isinstance(model, (str, Path)):
            if (Path(model) / "tokenizer_config.json").exists():
                self.tokenizer = AutoTokenizer.from_pretrained(model)
            model = CsmForConditionalGeneration.from_pretrained(model, dtype=torch.float32)
        if not isinstance(model, CsmForConditionalGeneration):
            raise ValueError(f"Speaker runs CSM (CsmForConditionalGeneration), not "
                             f"{type(model).__name__}")
        self.model = model.eval()
        self.loop = CsmFrames(self.model)
        codec = self.model.config.codec_config
        self.sample_rate = codec.sampling_rate
        self.samples_per_frame = codec.frame_size
        self.chunk = CSM.edge_from(BACKBONE).chunk

    def prompt_ids(self, text, speaker: int = 0) -> list[int]:
        """``{"prompt_token_ids": [...]}`` as given, or ``[speaker]text`` (CSM's turn format)
        through the model's tokenizer."""
        if isinstance(text, dict):
            return list(text["prompt_token_ids"])
        if self.tokenizer is None:
            raise ValueError("this model directory has no tokenizer: pass prompt_token_ids")
        return self.tokenizer.encode(f"[{speaker}]{text}")

    def stream(self, text, speaker: int = 0, max_frames: int = DEFAULT_MAX_FRAMES
               ) -> Iterator[tuple[torch.Tensor, list[np.ndarray]]]:
        """Each frame as it is made, with the audio chunks it made ready (the last frame also
        carries the leftover chunk). A frame of end codes only is not sounded."""
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, not {max_frames}")
        codec = CodecStream(mimi_decoder(self.model.codec_model), self.chunk,
                            self.samples_per_frame)
        end = self.loop.end_code
        frames = self.loop.frames(self.prompt_ids(text, speaker), max_frames)
        for i, frame in enumerate(frames):
            silent = bool((frame == end).all())
            chunks = [] if silent else codec.push(frame)
            if silent or self.loop.ends(frame) or i + 1 == max_frames:
                chunks += codec.finish()
            yield frame, chunks

    def speak(self, text, speaker: int = 0, max_frames: int = DEFAULT_MAX_FRAMES) -> Speech:
        frames, chunks = [], []
        for frame, ready in self.stream(text, speaker, max_frames):
            frames.append(frame)
            chunks += ready
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        return Speech(audio, self.sample_rate, torch.stack(frames))
