"""The graphs of speech-out models (issue 35): a language model streaming codec frames to a codec
node that emits audio, and the reference system's thinker -> talker -> code2wav.

CSM (``csm`` in transformers): the backbone is the language-model node; its depth decoder, which
turns the backbone's last hidden state and first code into the frame's other codes in a fixed
number of steps, is the backbone node's per-frame head, not a node: it holds no state from one
frame to the next (its short cache starts empty every frame), so it needs no KV budget, no
scheduling of its own and no edge (docs/speech.rst says more). Frames go to Mimi's decoder in
windows of ``CSM_CHUNK_FRAMES`` after ``CSM_LEFT_CONTEXT`` frames of context.

Qwen3-Omni (``qwen3_omni_moe``): ``thinker -> talker -> code2wav``, the thinker fed by its audio
encoder as Qwen2-Audio's language model is (``audio_encoder -> thinker``, placeholder rows); the
registry's Qwen3-Omni entry has this graph, so the served model emits text and audio. The thinker's
engine runs the thinker (``WalkGraph.language_model``: the first walk's); the talker and code2wav
run in the chain beside it (``mstar.engine.chain``). The talker's codes go to
code2wav in windows of ``OMNI_CHUNK_FRAMES`` after ``OMNI_LEFT_CONTEXT`` frames of context, the
numbers of transformers' ``Qwen3OmniMoeCode2Wav.chunked_decode`` as its ``generate`` calls it
(``mstar.models.speech.omni_code2wav``; test/models/test_omni_code2wav.py): the parity
reference. A server's windows are shorter, for a sooner first audio (MSTAR_SPEECH_CHUNK_FRAMES,
``mstar.engine.chain.speech_chain.served_windows``).

Qwen3-Omni's talker by itself (``talker_alone``): the talker node reads embedding rows the
request carries (``ROWS``: ``mstar.models.speech.row_feed.RowFeed``, the thinker's part already
projected) in place of token embeddings, and its codes stream to code2wav. It is how the engine
runs the talker until a step loop walks thinker -> talker (docs/speech.rst).
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
# transformers' Qwen3-Omni decodes the talker's codes with ``chunked_decode(codes,
# chunk_size=300, left_context_size=25)``: 300 frames (24 s at code2wav's 12.5 frames a second)
# per chunk, each after the 25 before it (2 s). The same windows make the same samples, so the
# codec node's chunks, joined, are transformers' waveform. A shorter chunk (a sooner first audio)
# is a serving choice for later; docs/speech.rst says more.
OMNI_CHUNK_FRAMES = 300
OMNI_LEFT_CONTEXT = 25
THINKER, TALKER, CODE2WAV = "thinker", "talker", "code2wav"
AUDIO_ENCODER = "audio_encoder"  # Qwen3-Omni's thinker takes audio (as Qwen2-Audio's model does)
# What a language-model node reads from the request when it is not text: embedding rows, one per
# prompt position and then one per decode step (Qwen3-Omni's talker).
ROWS = "rows"


def codec_after(lm: str = BACKBONE, codec: str = CODEC,
                chunk: ChunkPolicy = frame_windows(CSM_CHUNK_FRAMES, CSM_LEFT_CONTEXT),
                lm_reads: str = "text") -> WalkGraph:
    """One language model whose frames stream to a codec that emits audio (CSM): a request walks
    ``lm -> codec`` until ``lm``'s finish signal; no text reaches the client. ``lm_reads``: what
    the language model reads from the request ("text", or ``ROWS``)."""
    return WalkGraph(
        (Node(lm, NodeKind.LANGUAGE_MODEL, lm_reads), Node(codec, NodeKind.CODEC)),
        (Edge("codes", lm, codec, EdgeKind.STREAM, chunk),),
        (Walk(SPEAK, (lm, codec), finish=lm),),
        (Emit(codec, "audio"),))


def thinker_talker(chunk: ChunkPolicy = frame_windows(OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT)
                   ) -> WalkGraph:
    """Qwen3-Omni's shape: the thinker's tokens (with hidden states) stream to the talker, whose
    codes stream to code2wav. Text alone walks the thinker (audio in: after the audio encoder,
    whose rows fill the prompt's placeholders); speech walks all three, and ends at the talker's
    finish signal (it goes on after the thinker's last token). What the talker
    reads of each token, as transformers builds it: the token's input embedding; hidden states
    (of the config's ``accept_hidden_layer``) only at the prompt's audio, image and video
    positions (``mstar.models.speech.omni_talker_inputs``; docs/speech.rst)."""
    return WalkGraph(
        (Node(THINKER, NodeKind.LANGUAGE_MODEL), Node(AUDIO_ENCODER, NodeKind.ENCODER, "audio"),
         Node(TALKER, NodeKind.LANGUAGE_MODEL), Node(CODE2WAV, NodeKind.CODEC)),
        (Edge("audio_embeds", AUDIO_ENCODER, THINKER),
         Edge("hidden", THINKER, TALKER, EdgeKind.STREAM, every_token(with_hidden=True)),
         Edge("codes", TALKER, CODE2WAV, EdgeKind.STREAM, chunk)),
        (Walk("text", (THINKER,)), Walk("prefill_audio", (AUDIO_ENCODER, THINKER)),
         Walk(SPEAK, (THINKER, TALKER, CODE2WAV), finish=TALKER)),
        (Emit(THINKER, "text"), Emit(CODE2WAV, "audio")))


def talker_alone(chunk: ChunkPolicy = frame_windows(OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT)
                 ) -> WalkGraph:
    """Qwen3-Omni's talker run by itself: it reads the request's embedding rows (``ROWS``) and
    its codes stream to code2wav, as in ``thinker_talker``."""
    return codec_after(TALKER, CODE2WAV, chunk, lm_reads=ROWS)


CSM = codec_after()
QWEN3_OMNI = thinker_talker()
OMNI_TALKER = talker_alone()
