"""The model's codec node (CSM's Mimi decoder ``codec``, Qwen3-Omni's ``code2wav``) in this
process or in a process of its own (MSTAR_ENCODER_PLACEMENT ``codec=process``,
``code2wav=process``), beside the worker that runs the language model.

``load_codec`` makes the node in a process (the worker's, or the node's own): Qwen3-Omni's
code2wav in the served windows (a model whose registry entry names a talker), else CSM's Mimi,
its state per request checked against MSTAR_MAX_SPEECH_CODEC_BYTES there (``check_codec_memory``).
``CodecNodeProcess`` is the worker's handle on the node apart, with the local node's seam
(``mstar.models.speech.codec_node.CodecSeam``): ``take_all`` sends a step's new frames, every
request's, as one ``CodecFrames`` and returns the chunks of the ``CodecAudio`` reply; ``forget``
sends the aborted requests that hold state there (``CodecForget``). Each call is synchronous,
between engine steps, where the local node decodes too. The node process keeps one
``CodecStream`` per request, freed at its last frames or its forget, and every reply says how
many it holds (``held``: the worker's ``mstar_codec_requests`` gauge). The process itself
(start, sockets, stop, its death failing the worker's step: 503 for its requests) is every
placed node's (``mstar.worker.node_process``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import structlog

from mstar.ipc import messages as m
from mstar.worker.node_process import NodeProcess, node_child, serve_node

if TYPE_CHECKING:
    from mstar.models.speech.codec_node import CodecNode, Frames
    from mstar.models.speech.voice import Voice
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def load_codec(settings: WorkerSettings, model_dir: Path) -> CodecNode:
    """The model's codec node, here (a ValueError when its state is over its bound)."""
    from transformers import AutoConfig

    from mstar.engine.chain.speech_chain import served_windows
    from mstar.engine.placement import resolve_device_dtype
    from mstar.models.loading.registry import model_entry
    from mstar.models.speech.omni_code2wav import Code2Wav
    from mstar.models.speech.voice import Voice

    if model_entry(AutoConfig.from_pretrained(model_dir)).talker is not None:
        device, dtype = resolve_device_dtype(settings, model_dir)  # the talker's
        return Code2Wav.load(model_dir, device, dtype, served_windows(settings)).codec_node()
    voice = Voice.load(model_dir)
    check_codec_memory(voice, settings.max_speech_codec_bytes)
    return voice.codec_node()


def check_codec_memory(voice: Voice, bound: int) -> None:
    """MSTAR_MAX_SPEECH_CODEC_BYTES against the codec's state per request (fixed by the model:
    ``Voice.codec_state_bytes``)."""
    need = voice.codec_state_bytes()
    if need > bound:
        raise ValueError(f"this speech model's codec holds {need} bytes per request (its "
                         f"window of {voice.chunk.held_frames} frames and their samples), more "
                         f"than MSTAR_MAX_SPEECH_CODEC_BYTES ({bound}): raise it to serve it")


def main() -> None:
    """``python -m mstar.worker.codec_node NODE INBOX OUTBOX MAX_MESSAGE_BYTES``, the worker's
    settings as JSON on stdin: load the codec, say ready (with its sample rate), answer each
    ``CodecFrames`` and ``CodecForget`` until ``Shutdown``."""
    from mstar.models.loading.resolve import resolve_model_dir

    settings, (node,), requests, replies = node_child(m.TO_CODEC_NODE)
    codec = load_codec(settings, resolve_model_dir(settings))

    def answer(msg: m.CodecFrames | m.CodecForget) -> m.CodecAudio:
        if isinstance(msg, m.CodecForget):
            codec.forget(msg.request_ids)
            ready = []
        else:
            ready = codec.take_all([(r.request_id, r.frames, r.last) for r in msg.requests])
        return m.CodecAudio(msg.call, [[np.asarray(c, "<f4").tobytes() for c in chunks]
                                       for chunks in ready], codec.held)

    serve_node(requests, replies, m.NodeReady(node, codec.sample_rate), answer)


class CodecNodeProcess(NodeProcess):
    """The worker's handle on the codec node's process: the seam ``CodecNode`` has."""

    def __init__(self, settings: WorkerSettings, node: str, max_message_bytes: int) -> None:
        super().__init__(settings, node, "mstar.worker.codec_node", [node], m.FROM_CODEC_NODE,
                         m.NodeReady, max_message_bytes)
        log.info("codec_node_ready", node=node, pid=self.proc.pid)
        self.sample_rate = self.ready.sample_rate
        self.open: set[str] = set()  # requests whose frames went there and did not end
        self._held = 0

    @property
    def held(self) -> int:
        return self._held

    def take_all(self, requests: list[Frames]) -> list[list[np.ndarray]]:
        wire = [m.RequestFrames(*request) for request in requests]
        reply = self.call(lambda call: m.CodecFrames(call, wire), m.CodecAudio)
        for rid, _, last in requests:
            (self.open.discard if last else self.open.add)(rid)
        self._held = reply.held
        return [[np.frombuffer(chunk, "<f4") for chunk in chunks] for chunks in reply.chunks]

    def forget(self, request_ids: Iterable[str]) -> None:
        gone = [rid for rid in request_ids if rid in self.open]
        if gone:  # a request the node holds nothing for costs no call
            reply = self.call(lambda call: m.CodecForget(call, gone), m.CodecAudio)
            self.open.difference_update(gone)
            self._held = reply.held


if __name__ == "__main__":
    main()
