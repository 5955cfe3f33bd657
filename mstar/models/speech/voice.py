"""What turns a speech model's frames into a request's audio, wherever the frames come from: the
prompt's tokenizer (CSM's turn, ``[speaker]text``), Mimi's decoder as the codec node's decode, and
the walk graph's windows (``mstar.graph.speech.CSM``). ``Voice.load`` keeps Mimi alone
(``mstar.LLM.speak``: the engine runs the backbone); ``Speaker`` adds transformers' frame loop
beside the engine."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mstar.graph.speech import BACKBONE, CSM
from mstar.models.speech.codec_node import CodecNode, CodecStream, mimi_decoder
from mstar.models.speech.csm_frames import frame_ends
from mstar.models.speech.utterance import csm_turn

Sounded = Iterator[tuple[torch.Tensor, list[np.ndarray]]]


@dataclass
class Speech:
    audio: np.ndarray  # mono float32 samples at ``sample_rate``
    sample_rate: int
    codes: torch.Tensor  # [frames, codebooks], as transformers' generate returns them


def tokenizer_of(model_dir):
    """The directory's tokenizer, or None (prompts then come as token ids)."""
    from transformers import AutoTokenizer

    found = (Path(model_dir) / "tokenizer_config.json").exists()
    return AutoTokenizer.from_pretrained(model_dir) if found else None


class Voice:
    def __init__(self, codec_model, config, tokenizer) -> None:
        """``codec_model``: Mimi (transformers' module); ``config``: the model's ``CsmConfig``."""
        self.tokenizer = tokenizer
        self.codec_model = codec_model.eval()
        codec = config.codec_config
        self.sample_rate = codec.sampling_rate
        self.samples_per_frame = codec.frame_size
        self.codebooks = config.num_codebooks
        self.end_code = config.codebook_eos_token_id
        self.text_vocab_size = config.text_vocab_size  # the prompt's tokens
        self.chunk = CSM.edge_from(BACKBONE).chunk

    @classmethod
    def load(cls, model_dir) -> Voice:
        """Mimi and the tokenizer. Mimi comes through transformers' whole model (its loader
        maps the checkpoint's names to Mimi's modules), whose other parts are then dropped."""
        from transformers import CsmForConditionalGeneration

        model = CsmForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32)
        return cls(model.codec_model, model.config, tokenizer_of(model_dir))

    def prompt_ids(self, text, speaker: int = 0) -> list[int]:
        """``{"prompt_token_ids": [...]}`` as given, or ``[speaker]text`` (CSM's turn format)
        through the model's tokenizer."""
        if isinstance(text, dict):
            return list(text["prompt_token_ids"])
        if self.tokenizer is None:
            raise ValueError("this model directory has no tokenizer: pass prompt_token_ids")
        return self.tokenizer.encode(csm_turn(text, speaker))

    def codec(self) -> CodecStream:
        """A request's codec node state: Mimi's decoder over the graph's windows."""
        return CodecStream(mimi_decoder(self.codec_model), self.chunk, self.samples_per_frame)

    def codec_state_bytes(self) -> int:
        """The most memory one request's codec state holds between chunks: its window's frames
        (``ChunkPolicy.held_frames`` of int64 codes, as ``CodecStream`` keeps them) and one
        window's decoded float32 samples. Fixed by the model and the graph's window."""
        frames = self.chunk.held_frames
        return frames * self.codebooks * 8 + frames * self.samples_per_frame * 4

    def codec_node(self) -> CodecNode:
        """The codec node serving requests by id (the worker's speech out)."""
        return CodecNode(self.codec, self.sample_rate, self.sounded)

    def sounded(self, frame: torch.Tensor) -> bool:
        """A frame of end codes only is not sounded, as in transformers (``codec_node``'s rule,
        so ``sound``'s and the served path's)."""
        return not bool((frame == self.end_code).all())

    def sound(self, frames: Iterable[torch.Tensor], max_frames: int) -> Sounded:
        """Each frame with the audio chunks it made ready (the last frame also carries the
        leftover chunk); the frames end after the end frame or at ``max_frames``."""
        node = self.codec_node()  # the worker's codec node, for one request
        for i, frame in enumerate(frames):
            last = frame_ends(frame.tolist(), self.end_code) or i + 1 == max_frames
            yield frame, node.take("sound", [frame.tolist()], last)

    def speech(self, sounded: Iterable[tuple[torch.Tensor, list[np.ndarray]]]) -> Speech:
        """The whole of ``sound``: every frame and the joined audio."""
        frames, chunks = [], []
        for frame, ready in sounded:
            frames.append(frame)
            chunks += ready
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        return Speech(audio, self.sample_rate, torch.stack(frames))
