"""The codec node of the worker that runs the backbone (``/v1/audio/speech``): each step's frames
(``RequestOutput.new_frames``) go through their request's state in the codec node in the graph's
windows, and the audio that became ready leaves with the output as an ``AudioChunk`` (float32
bytes), so the API server only frames bytes and never imports torch for speech.

The worker makes one at load when the model's language model streams frames to a codec
(``speech_out``: ``WalkGraph.speaks_frames``), and only then
routes its outputs through ``sound``: a text model's publish path is unchanged. The codec node is
a seam chosen once at load (``codec_seam``): in the worker (``CodecNode``) or, placed by
MSTAR_ENCODER_PLACEMENT, in a process of its own (``mstar.worker.codec_node``); the chained walk
(``speech_chain``) takes the same seam. A request's codec
state lives from its first frame to its finish (end frame, ``max_tokens`` frames, a failure's
abort output) or its abort by the API server (``forget``: the engine emits nothing then); it is
at most the edge's window (``L + N`` frames), whose bytes are checked against
MSTAR_MAX_SPEECH_CODEC_BYTES once, where the codec is loaded (``check_codec_memory``): a
request's state cannot grow past it, so admission has nothing more to check.
The decode runs between steps, on the worker's thread or in the node's process while the worker
waits: a chunk every ``N`` frames per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from mstar.engine.request.outputs import RequestOutput, audio_chunk
from mstar.graph.kinds import NodeKind
from mstar.graph.placement import nodes_apart

if TYPE_CHECKING:
    from mstar.ipc.security import SocketSecurity
    from mstar.models.speech.codec_node import CodecSeam


class SpeechOut:
    def __init__(self, codec: CodecSeam, prompt_vocab_size: int) -> None:
        self.codec = codec
        # the prompt's token ids are text tokens, not codes (the worker's inbox checks them)
        self.prompt_vocab_size = prompt_vocab_size

    def sound(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """The step's outputs, each with the audio its frames made ready: one call of the codec
        node for all of them (and one forget for the finished ones whose audio is not wanted:
        an abort output, or a finish without a frame)."""
        gone = [out.request_id for out in outputs
                if out.finished and (out.finish_reason == "abort" or not out.new_frames)]
        if gone:
            self.codec.forget(gone)
        sounded = [out for out in outputs if out.new_frames and out.finish_reason != "abort"]
        if not sounded:
            return outputs
        ready = self.codec.take_all([(out.request_id, out.new_frames, out.finished)
                                     for out in sounded])
        audio = {id(out): chunks for out, chunks in zip(sounded, ready, strict=True)}
        return [self._with_audio(out, audio[id(out)]) if id(out) in audio else out
                for out in outputs]

    def forget(self, request_ids: list[str]) -> None:
        """Requests aborted in the engine (a client gone): no output will finish them here."""
        self.codec.forget(request_ids)

    def _with_audio(self, out: RequestOutput, chunks: list[np.ndarray]) -> RequestOutput:
        if not chunks and not out.finished:
            return out
        # a finished request always carries a chunk (maybe empty): its rate reaches the client
        return msgspec.structs.replace(out, new_audio=audio_chunk(chunks, self.codec.sample_rate))


def codec_seam(engine, security: SocketSecurity) -> CodecSeam | None:
    """``engine``'s model's codec node, as the worker calls it: None unless the engine's
    language model streams frames to it (CSM) or its chain speaks (Qwen3-Omni); in a process of
    its own where MSTAR_ENCODER_PLACEMENT places it (over sockets of the worker's ``security``),
    else here. A ValueError (the worker does not start) when its codec state is over its
    bound."""
    from mstar.worker.codec_node import CodecNodeProcess, load_codec

    graph = engine.graph
    if not graph.speaks_frames and engine.model_runner.entry.talker is None:
        return None
    (node,) = (n.name for n in graph.codecs)
    if node in nodes_apart(engine.settings.encoder_placement, graph, NodeKind.CODEC):
        return CodecNodeProcess(engine.settings, node, security.max_message_bytes)
    return load_codec(engine.settings, engine.model_dir)


def speech_out(engine, codec: CodecSeam | None) -> SpeechOut | None:
    """The worker's speech out for ``engine``'s model through ``codec`` (``codec_seam``): None
    unless its language model streams frames to a codec (``WalkGraph.speaks_frames``: CSM;
    Qwen3-Omni's chain sounds its own)."""
    if not engine.graph.speaks_frames:
        return None
    from transformers import AutoConfig

    return SpeechOut(codec, AutoConfig.from_pretrained(engine.model_dir).text_vocab_size)


def speech_chain(engine, codec: CodecSeam | None, security: SocketSecurity):
    """The chained walk that runs ``engine`` with its talker and ``codec`` (a Qwen3-Omni
    directory: its registry entry names a talker; ``mstar.engine.chain``), or None. Its outputs
    carry the audio itself (``new_audio``), so ``SpeechOut`` is not used for it. With
    MSTAR_ENCODER_PLACEMENT ``talker=process`` its talker runs in a process of its own
    (``mstar.worker.talker_node``), started here, after the thinker's engine."""
    talker = engine.model_runner.entry.talker
    if talker is None:
        return None
    from mstar.engine.chain.speech_chain import SpeechChain
    from mstar.worker.talker_node import TalkerNodeProcess

    if not nodes_apart(engine.settings.encoder_placement, engine.graph, NodeKind.LANGUAGE_MODEL):
        return SpeechChain(engine, codec=codec)
    placed = TalkerNodeProcess(engine.settings, talker, security.max_message_bytes)
    try:
        return SpeechChain(engine, talker=placed, codec=codec)
    except BaseException:
        placed.close()
        raise
