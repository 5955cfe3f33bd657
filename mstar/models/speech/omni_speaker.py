"""Offline Qwen3-Omni speech beside the engine, the counterpart of CSM's ``Speaker``:
``OmniSpeaker(model_dir).speak(prompt_ids)`` answers a chat prompt with text and speech.

The thinker is transformers' module (mstar's thinker is not built yet) and answers greedily; its
embeddings become the talker's rows (``omni_talker_inputs``); mstar's talker loop makes the
frames (``TalkerFrames``, the code predictor as its frame head); the codec node sounds them in
the graph's windows (``Code2Wav``). All three read one loaded transformers model, so the
checkpoint is read once. The prompt is token ids in Qwen3-Omni's chat format, ending with the
assistant turn's ``<|im_start|>assistant\\n``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from mstar.graph.chunks import ChunkPolicy
from mstar.graph.speech import QWEN3_OMNI, TALKER
from mstar.models.speech.omni_code2wav import Code2Wav
from mstar.models.speech.omni_talker import TalkerFrames
from mstar.models.speech.omni_talker_inputs import TalkerInputs, talker_inputs
from mstar.models.speech.utterance import check_max_frames
from mstar.models.speech.voice import Speech

DEFAULT_SPEAKER = "ethan"  # Qwen3-Omni's default voice (transformers' ``generate``'s "Ethan")


class OmniSpeaker:
    def __init__(self, model, chunk: ChunkPolicy = QWEN3_OMNI.edge_from(TALKER).chunk) -> None:
        """``model``: a local Qwen3-Omni directory or a loaded
        ``Qwen3OmniMoeForConditionalGeneration`` with its talker; ``chunk``: code2wav's windows
        (the graph's: transformers' numbers; a server's are MSTAR_SPEECH_CHUNK_FRAMES')."""
        from transformers import Qwen3OmniMoeForConditionalGeneration

        if isinstance(model, (str, Path)):
            model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(model,
                                                                         dtype=torch.float32)
        self.model = model.eval()
        self.talker = TalkerFrames(model.talker)
        self.codec = Code2Wav(model.code2wav, chunk)

    @torch.inference_mode()
    def answer(self, prompt_ids: list[int], max_tokens: int,
               speaker: str = DEFAULT_SPEAKER) -> tuple[list[int], TalkerInputs]:
        """The thinker's greedy reply (prompt and reply ids, to its end token or
        ``max_tokens``) and the talker's rows for it."""
        config, thinker = self.model.config, self.model.thinker
        out = thinker.generate(input_ids=torch.tensor([prompt_ids]), max_new_tokens=max_tokens,
                               eos_token_id=config.im_end_token_id, do_sample=False,
                               output_hidden_states=True, return_dict_in_generate=True)
        layer = config.talker_config.accept_hidden_layer
        embeds = torch.cat([h[0] for h in out.hidden_states], dim=1)[0]
        hidden = torch.cat([h[layer] for h in out.hidden_states], dim=1)[0]
        tts = thinker.get_input_embeddings()(torch.tensor(
            [config.tts_bos_token_id, config.tts_eos_token_id, config.tts_pad_token_id]))
        said = out.sequences[0].tolist()
        speaker_id = config.talker_config.speaker_id[speaker.lower()]
        return said, talker_inputs(self.model.talker, config, said, len(prompt_ids), embeds,
                                   hidden, tts, speaker_id)

    def stream(self, inputs: TalkerInputs,
               max_frames: int) -> Iterator[tuple[torch.Tensor, list[np.ndarray]]]:
        """Each frame with the audio chunks it made ready; the last frame also carries the
        leftover. A frame goes out when the next one is made (only then is it known whether it
        was the last: the talker's end shows at the next step's code 0)."""
        check_max_frames(max_frames)
        codec = self.codec.stream()
        pending = None
        for frame in self.talker.frames(inputs.prompt, inputs.text, inputs.pad, max_frames):
            if pending is not None:
                yield pending
            pending = frame, codec.push(frame)
        if pending is not None:
            yield pending[0], pending[1] + codec.finish()

    def speak(self, prompt_ids: list[int], max_tokens: int, max_frames: int,
              speaker: str = DEFAULT_SPEAKER) -> tuple[list[int], Speech]:
        """The reply's ids (prompt first) and its speech."""
        said, inputs = self.answer(prompt_ids, max_tokens, speaker)
        frames, chunks = [], []
        for frame, ready in self.stream(inputs, max_frames):
            frames.append(frame)
            chunks += ready
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        codes = torch.stack(frames) if frames else torch.zeros(0, 0, dtype=torch.int64)
        return said, Speech(audio, self.codec.sample_rate, codes)
