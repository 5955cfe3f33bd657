"""Offline speech out beside the engine: ``Speaker(model_dir).speak("Hello")`` runs a CSM model's
frame loop (``csm_frames``, transformers' cache for the backbone: the reference the engine is
tested against) and sounds its frames through the codec node (``Voice``), cut by the chunk policy
of the model's walk graph (``mstar.graph.speech.CSM``). ``mstar.LLM.speak`` runs the frame loop in
the engine (paged KV cache, batched, preemptible) and sounds its frames with ``Voice.load``."""

from __future__ import annotations

from pathlib import Path

import torch

from mstar.models.speech.csm_frames import CsmFrames
from mstar.models.speech.utterance import DEFAULT_MAX_FRAMES, check_max_frames
from mstar.models.speech.voice import Sounded, Speech, Voice, tokenizer_of


class Speaker(Voice):
    """A CSM model (a local HF-format directory, or a loaded ``CsmForConditionalGeneration``)."""

    def __init__(self, model) -> None:
        from transformers import CsmForConditionalGeneration

        tokenizer = None
        if isinstance(model, (str, Path)):
            tokenizer = tokenizer_of(model)
            model = CsmForConditionalGeneration.from_pretrained(model, dtype=torch.float32)
        if not isinstance(model, CsmForConditionalGeneration):
            raise ValueError(f"Speaker runs CSM (CsmForConditionalGeneration), not "
                             f"{type(model).__name__}")
        self.model = model.eval()
        self.loop = CsmFrames(self.model)
        super().__init__(self.model.codec_model, self.model.config, tokenizer)

    def stream(self, text, speaker: int = 0, max_frames: int = DEFAULT_MAX_FRAMES) -> Sounded:
        """Each frame as it is made, with the audio chunks it made ready (``Voice.sound``)."""
        check_max_frames(max_frames)
        return self.sound(self.loop.frames(self.prompt_ids(text, speaker), max_frames),
                          max_frames)

    def speak(self, text, speaker: int = 0, max_frames: int = DEFAULT_MAX_FRAMES) -> Speech:
        return self.speech(self.stream(text, speaker, max_frames))
