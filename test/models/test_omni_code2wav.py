"""Qwen3-Omni's code2wav as mstar's codec node, on a tiny random Qwen3-Omni (float32): the
talker's frames pushed one by one through ``CodecStream`` in the graph's windows
(``QWEN3_OMNI``'s ``codes`` edge: 300 frames after 25 of left context) come out, joined, as
transformers' waveform for the same codes.

The reference is transformers' ``Qwen3OmniMoeCode2Wav.chunked_decode`` with the numbers its
``generate`` passes (``chunk_size=300, left_context_size=25``): that is how transformers turns a
talker's codes into audio. One whole decode is not the reference: each window's transposed
convolutions cut a few samples at its end (so the chunks are shorter by that much per window),
and its attention reaches ``sliding_window`` frames back, past the left context."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omni_helpers import SAMPLES_PER_FRAME, random_codes, save_tiny_omni

from mstar.engine.chain.speech_chain import served_windows
from mstar.graph.chunks import ChunkPolicy, frame_windows
from mstar.graph.speech import OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT, QWEN3_OMNI, TALKER
from mstar.models.speech.omni_code2wav import Code2Wav
from mstar.settings import WorkerSettings

# Largest sample difference allowed against transformers' chunked_decode, relative to its peak:
# the same windows through the same module with the same weights, so only float32 rounding may
# differ (measured: 0, the samples are bitwise equal). One frame less of left context moves the
# tiny model's samples by 2-3% of the peak, no left context by over 50% (the last test).
WAVE_TOLERANCE = 1e-6
# Shorter than one window; two whole windows; three windows with a ragged last one.
LENGTHS = (7, 2 * OMNI_CHUNK_FRAMES, 2 * OMNI_CHUNK_FRAMES + 37)
# The served windows: MSTAR_SPEECH_CHUNK_FRAMES and MSTAR_SPEECH_LEFT_CONTEXT's defaults, and the
# served test's (test/api/test_chat_audio_serve.py: 4 after 8)
SERVED = (served_windows(WorkerSettings()), frame_windows(4, 8))


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory, tiny_tokenizer):
    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer)


@pytest.fixture(scope="module")
def reference(tiny_omni):
    """transformers' code2wav, read through transformers' whole model."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(tiny_omni,
                                                                 dtype=torch.float32)
    return model.code2wav.eval()


def _reference_wave(code2wav, codes: torch.Tensor,
                    chunk: ChunkPolicy = frame_windows(OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT)
                    ) -> np.ndarray:
    with torch.no_grad():
        wave = code2wav.chunked_decode(codes.T.unsqueeze(0), chunk_size=chunk.frames,
                                       left_context_size=chunk.left_context)
    return wave[0, 0].numpy()


def _streamed(codec: Code2Wav, codes: torch.Tensor) -> list[tuple[int, int]]:
    """Each chunk as (the frame whose push made it ready, its samples); the leftover after the
    finish signal is made ready at frame ``len(codes)``."""
    stream = codec.stream()
    chunks = [(i + 1, c) for i, frame in enumerate(codes) for c in stream.push(frame)]
    return chunks + [(len(codes), c) for c in stream.finish()]


def _joined(chunks) -> np.ndarray:
    return np.concatenate([c for _, c in chunks])


def test_the_graph_declares_transformers_windows():
    chunk = QWEN3_OMNI.edge_from(TALKER).chunk
    assert chunk == frame_windows(300, 25) == frame_windows(OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT)
    assert chunk.held_frames == 325  # the codec node's state per request, at most


@pytest.mark.parametrize("frames", LENGTHS)
def test_streamed_chunks_are_transformers_chunked_decode(tiny_omni, reference, frames):
    codec = Code2Wav.load(tiny_omni)
    assert codec.samples_per_frame == SAMPLES_PER_FRAME and codec.sample_rate == 24_000
    codes = random_codes(frames, seed=frames)
    chunks = _streamed(codec, codes)
    wave = _reference_wave(reference, codes)
    ours = _joined(chunks)
    assert ours.dtype == np.float32 and ours.shape == wave.shape
    assert np.abs(wave).max() > 0.01  # the tiny decoder is not silent (omni_helpers' gain)
    assert np.abs(ours - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()
    # a chunk leaves as soon as its window is whole, not at the talker's finish
    ready = [at for at, _ in chunks]
    whole = frames // OMNI_CHUNK_FRAMES
    assert ready == [OMNI_CHUNK_FRAMES * (i + 1) for i in range(whole)] + \
        ([frames] if frames % OMNI_CHUNK_FRAMES else [])


def test_a_wrong_left_context_is_not_within_tolerance(tiny_omni, reference):
    """The check above can fail: one frame less of left context than transformers uses."""
    module = Code2Wav.load(tiny_omni).module
    wrong = Code2Wav(module, frame_windows(OMNI_CHUNK_FRAMES, OMNI_LEFT_CONTEXT - 1))
    codes = random_codes(LENGTHS[-1], seed=1)
    ours, wave = _joined(_streamed(wrong, codes)), _reference_wave(reference, codes)
    assert ours.shape == wave.shape
    assert np.abs(ours - wave).max() > 100 * WAVE_TOLERANCE * np.abs(wave).max()


@pytest.mark.parametrize("chunk", SERVED, ids=lambda c: f"{c.frames}after{c.left_context}")
def test_served_windows_are_chunked_decode_with_the_same_numbers(tiny_omni, reference, chunk):
    """A server's shorter windows (a sooner first audio) against transformers' ``chunked_decode``
    given the same numbers: the same tolerance (WAVE_TOLERANCE of the peak); a chunk goes out as
    soon as its window is whole."""
    codec = Code2Wav(Code2Wav.load(tiny_omni).module, chunk)
    frames = 3 * chunk.frames + chunk.left_context + 3  # whole windows with context, then a tail
    codes = random_codes(frames, seed=chunk.frames)
    chunks = _streamed(codec, codes)
    ours, wave = _joined(chunks), _reference_wave(reference, codes, chunk)
    assert ours.shape == wave.shape
    assert np.abs(ours - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()
    assert [at for at, _ in chunks][0] == chunk.frames
