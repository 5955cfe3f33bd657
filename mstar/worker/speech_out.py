"""The codec node in the worker that runs the backbone (``/v1/audio/speech``): each step's frames
(``RequestOutput.new_frames``) go through their request's ``CodecStream`` in the graph's windows,
and the audio that became ready leaves with the output as an ``AudioChunk`` (float32 bytes), so
the API server only frames bytes and never imports torch for speech.

The worker makes one at load when the model's language model streams frames to a codec
(``speech_out``: ``WalkGraph.speaks_frames``), and only then
routes its outputs through ``sound``: a text model's publish path is unchanged. A request's codec
state lives from its first frame to its finish (end frame, ``max_tokens`` frames, a failure's
abort output) or its abort by the API server (``forget``: the engine emits nothing then); it is
at most the edge's window (``L + N`` frames), whose bytes are checked against
MSTAR_MAX_SPEECH_CODEC_BYTES once, at load (``check_codec_memory``): a request's state cannot
grow past it, so admission has nothing more to check.
The decode runs on the worker's thread between steps: a chunk every ``N`` frames per request.
"""

from __future__ import annotations

import msgspec
import numpy as np
import torch

from mstar.engine.request.outputs import AudioChunk, RequestOutput
from mstar.models.speech.codec_node import CodecStream
from mstar.models.speech.voice import Voice


class SpeechOut:
    def __init__(self, voice: Voice, prompt_vocab_size: int) -> None:
        self.voice = voice
        # the prompt's token ids are text tokens, not codes (the worker's inbox checks them)
        self.prompt_vocab_size = prompt_vocab_size
        self.codecs: dict[str, CodecStream] = {}  # live requests with frames, by request id

    def sound(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """The step's outputs, each with the audio its frames made ready."""
        return [self._sounded(out) for out in outputs]

    def forget(self, request_ids: list[str]) -> None:
        """Requests aborted in the engine (a client gone): no output will finish them here."""
        for rid in request_ids:
            self.codecs.pop(rid, None)

    def _sounded(self, out: RequestOutput) -> RequestOutput:
        codec = self._codec(out)
        if codec is None:  # aborted (its audio is not wanted), or no frame yet
            return out
        frames = out.new_frames or []
        chunks = []
        for i, frame in enumerate(frames):
            last = out.finished and i + 1 == len(frames)
            chunks += self.voice.take(codec, torch.tensor(frame), last)
        if not chunks and not out.finished:
            return out
        # a finished request always carries a chunk (maybe empty): its rate reaches the client
        samples = np.concatenate(chunks or [np.zeros(0)]).astype("<f4").tobytes()
        return msgspec.structs.replace(out, new_audio=AudioChunk(samples, self.voice.sample_rate))

    def _codec(self, out: RequestOutput) -> CodecStream | None:
        """The request's codec state (made at its first frame, forgotten at its finish)."""
        if out.finished:
            codec = self.codecs.pop(out.request_id, None)
            if out.finish_reason == "abort" or not out.new_frames:
                return None
            return codec or self.voice.codec()
        if not out.new_frames:
            return None
        if out.request_id not in self.codecs:
            self.codecs[out.request_id] = self.voice.codec()
        return self.codecs[out.request_id]


def speech_out(engine) -> SpeechOut | None:
    """The worker's codec node for ``engine``'s model: None unless its language model streams
    frames to a codec (``WalkGraph.speaks_frames``: CSM; Qwen3-Omni's chain sounds its own);
    a ValueError (the worker does not start) when its codec state is over its bound."""
    if not engine.graph.speaks_frames:
        return None
    voice = Voice.load(engine.model_dir)
    check_codec_memory(voice, engine.settings.max_speech_codec_bytes)
    return SpeechOut(voice, voice.text_vocab_size)


def check_codec_memory(voice: Voice, bound: int) -> None:
    """MSTAR_MAX_SPEECH_CODEC_BYTES against the codec's state per request (fixed by the model:
    ``Voice.codec_state_bytes``)."""
    need = voice.codec_state_bytes()
    if need > bound:
        raise ValueError(f"this speech model's codec holds {need} bytes per request (its "
                         f"window of {voice.chunk.held_frames} frames and their samples), more "
                         f"than MSTAR_MAX_SPEECH_CODEC_BYTES ({bound}): raise it to serve it")


def speech_chain(engine, max_message_bytes: int):
    """The chained walk that runs ``engine`` with its talker and code2wav (a Qwen3-Omni
    directory: its registry entry names a talker; ``mstar.engine.chain``), or None. Its outputs
    carry the audio itself (``new_audio``), so ``SpeechOut`` is not used for it. With
    MSTAR_ENCODER_PLACEMENT ``talker=process`` its talker runs in a process of its own
    (``mstar.worker.talker_node``), started here, after the thinker's engine."""
    talker = engine.model_runner.entry.talker
    if talker is None:
        return None
    from mstar.engine.chain.speech_chain import SpeechChain
    from mstar.graph.kinds import NodeKind
    from mstar.graph.placement import apart_of_kind
    from mstar.worker.talker_node import TalkerNodeProcess

    if not apart_of_kind(engine.settings.encoder_placement, engine.graph,
                         NodeKind.LANGUAGE_MODEL):
        return SpeechChain(engine)
    placed = TalkerNodeProcess(engine.settings, talker, max_message_bytes)
    try:
        return SpeechChain(engine, talker=placed)
    except BaseException:
        placed.close()
        raise
