"""Offline speech out: ``Speaker(model_dir).speak("Hello")`` runs a CSM model's frame loop
(``csm_frames``) and streams its frames through a codec node (``codec_node``) cut by the chunk
policy of the model's walk graph (``mstar.graph.speech.CSM``), as the served route will.

``Speaker.stream`` runs the frame loop beside the engine, with a transformers cache for the
backbone (the reference the engine is tested against); ``mstar.LLM.speak`` runs it in the engine
(paged KV cache, batched, preemptible) and sounds its frames here, through ``Speaker.sound``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
        check_max_frames(max_frames)
        return self.sound(self.loop.frames(self.prompt_ids(text, speaker), max_frames),
                          max_frames)

    def sound(self, frames: Iterable[torch.Tensor], max_frames: int
              ) -> Iterator[tuple[torch.Tensor, list[np.ndarray]]]:
        """``stream`` for frames made elsewhere (the engine's: ``mstar.LLM.speak``), which end
        as this loop's do: after the end frame, or at ``max_frames``."""
        codec = CodecStream(mimi_decoder(self.model.codec_model), self.chunk,
                            self.samples_per_frame)
        end = self.loop.end_code
        for i, frame in enumerate(frames):
            silent = bool((frame == end).all())
            chunks = [] if silent else codec.push(frame)
            if silent or self.loop.ends(frame) or i + 1 == max_frames:
                chunks += codec.finish()
            yield frame, chunks

    def speak(self, text, speaker: int = 0, max_frames: int = DEFAULT_MAX_FRAMES) -> Speech:
        return self.speech(self.stream(text, speaker, max_frames))

    def speech(self, sounded: Iterable[tuple[torch.Tensor, list[np.ndarray]]]) -> Speech:
        """The whole of ``stream`` or ``sound``: every frame and the joined audio."""
        frames, chunks = [], []
        for frame, ready in sounded:
            frames.append(frame)
            chunks += ready
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        return Speech(audio, self.sample_rate, torch.stack(frames))


def check_max_frames(max_frames: int) -> None:
    if max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, not {max_frames}")
