"""The graphs of speech-out models (issue 35): a language model streaming codec frames to a codec
node that emits audio, and the reference system's thinker -> talker -> code2wav.

CSM (``csm`` in transformers): the backbone is the language-model node; its depth decoder, which
turns the backbone's last hidden state and first code into the frame's other codes in a fixed
number of steps, is the backbone node's per-frame head, not a node: it holds no state from one
frame to the next (its short cache starts empty every frame), so it needs no KV budget, no
scheduling of its own and no edge (docs/speech.rst says more). Frames go to Mimi's decoder in
windows of ``CSM_CHUNK_FRAMES`` after ``CSM_LEFT_CONTEXT`` frames of context.
"""

from __future__ import annotations

from mstar.graph.chunks import ChunkPolicy, every_token, frame_windows
from mstar.graph.kinds import EdgeKind, NodeKind
from mstar.graph.walk_graph import Edge, Emit, Node, Walk, WalkGraph

# Mimi makes 12.5 frames a second: 4 frames are 320 ms of audio per chunk, the first chunk's
# wait; 8 frames of left context (640 ms) keep each chunk's samples close to one whole decode
# (test/models/test_csm.py states the tolerance).
CSM_CHUNK_FRAMES = 4
CSM_LEFT_CONTEXT = 8
BACKBONE, CODEC, SPEAK = "backbone", "codec", "speak"


def codec_after(lm: str = BACKBONE, codec: str = CODEC,
                chunk: ChunkPolicy = frame_windows(CSM_CHUNK_FRAMES, CSM_LEFT_CONTEXT)
                ) -> WalkGraph:
    """One language model whose frames stream to a codec that emits audio (CSM): a request walks
    ``lm -> codec`` until ``lm``'s finish signal; no text reaches the client."""
    return WalkGraph(
        (Node(lm, NodeKind.LANGUAGE_MODEL), Node(codec, NodeKind.CODEC)),
        (Edge("codes", lm, codec, EdgeKind.STREAM, chunk),),
        (Walk(SPEAK, (lm, codec), finish=lm),),
        (Emit(codec, "audio"),))


def thinker_talker(chunk: ChunkPolicy = frame_windows(CSM_CHUNK_FRAMES, CSM_LEFT_CONTEXT)
                   ) -> WalkGraph:
    """Qwen3-Omni's shape: the thinker's tokens (with hidden states) stream to the talker, whose
    codes stream to code2wav. Text alone walks the thinker; speech walks all three, and ends
    at the talker's finish signal (it goes on after the thinker's last token)."""
    return WalkGraph(
        (Node("thinker", NodeKind.LANGUAGE_MODEL), Node("talker", NodeKind.LANGUAGE_MODEL),
         Node("code2wav", NodeKind.CODEC)),
        (Edge("hidden", "thinker", "talker", EdgeKind.STREAM, every_token(with_hidden=True)),
         Edge("codes", "talker", "code2wav", EdgeKind.STREAM, chunk)),
        (Walk("text", ("thinker",)),
         Walk(SPEAK, ("thinker", "talker", "code2wav"), finish="talker")),
        (Emit("thinker", "text"), Emit("code2wav", "audio")))


CSM = codec_after()
