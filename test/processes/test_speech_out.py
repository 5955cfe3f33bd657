"""The worker's codec node (``mstar.worker.speech_out.SpeechOut``) on a tiny random CSM: the
audio it attaches to a request's outputs, joined, is ``Voice.sound``'s for the same frames
(``LLM.speak``'s path), whatever the outputs' grouping and interleaving with another request;
its state per request stays within the edge's window and is gone at the finish, at an abort
output and when the API server aborts the request (``forget``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from csm_helpers import CODEBOOKS, CODES, save_tiny_csm

from mstar.engine.request.outputs import RequestOutput
from mstar.graph.speech import CSM_CHUNK_FRAMES, CSM_LEFT_CONTEXT


@pytest.fixture(scope="module")
def voice(tmp_path_factory, tiny_tokenizer):
    from mstar.models.speech.voice import Voice

    return Voice.load(save_tiny_csm(tmp_path_factory.mktemp("csm"), tiny_tokenizer))


@pytest.fixture(scope="module")
def speech_out(voice):
    from mstar.worker.speech_out import SpeechOut

    return SpeechOut(voice.codec_node(), voice.text_vocab_size)


def _frames(seed: int, n: int) -> list[list[int]]:
    """Frames with no end code (0) in them: none ends the request early."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, CODES, (n, CODEBOOKS), generator=gen).tolist()


def _outputs(rid: str, frames: list[list[int]], sizes: list[int]) -> list[RequestOutput]:
    outs, at = [], 0
    for k, size in enumerate(sizes):
        part = frames[at:at + size]
        at += size
        last = k + 1 == len(sizes)
        outs.append(RequestOutput(rid, [f[0] for f in part], finished=last,
                                  finish_reason="length" if last else None, new_frames=part))
    return outs


def _expected(voice, frames) -> np.ndarray:
    return voice.speech(voice.sound(torch.tensor(frames).unbind(0), len(frames))).audio


def test_outputs_carry_voice_sounds_audio_per_request(speech_out, voice):
    one, two = _frames(1, 20), _frames(2, 9)
    a = _outputs("a", one, [1] * 20)
    b = _outputs("b", two, [2, 3, 1, 3])
    got = {"a": [], "b": []}
    for step in range(20):  # interleaved, as a step's outputs are
        batch = [a[step]] + ([b[step]] if step < len(b) else [])
        for out in speech_out.sound(batch):
            if out.new_audio is not None:
                assert out.new_audio.rate == voice.sample_rate
                got[out.request_id].append(np.frombuffer(out.new_audio.samples, "<f4"))
            held = speech_out.codec.streams.get(out.request_id)
            assert held is None or len(held.held) <= CSM_LEFT_CONTEXT + CSM_CHUNK_FRAMES
    for rid, frames in (("a", one), ("b", two)):
        expected = _expected(voice, frames)
        assert np.array_equal(np.concatenate(got[rid]), expected)
    assert speech_out.codec.streams == {}  # both finished: nothing kept


def test_an_abort_drops_the_codec_state(speech_out):
    frames = _frames(3, 6)
    speech_out.sound(_outputs("c", frames, [6, 0])[:1])  # running, with frames
    speech_out.sound(_outputs("d", frames, [6, 0])[:1])
    assert set(speech_out.codec.streams) == {"c", "d"} and speech_out.codec.held == 2
    speech_out.forget(["c"])  # the API server aborted it: the engine emits nothing more
    aborted = RequestOutput("d", finished=True, finish_reason="abort")
    assert speech_out.sound([aborted]) == [aborted]  # no decode of its leftover
    assert speech_out.codec.streams == {} and speech_out.codec.held == 0


def test_codec_state_is_within_its_bytes_and_the_bound_is_checked(speech_out, voice):
    """``Voice.codec_state_bytes`` bounds what a request's codec holds (its codes, and the samples
    of a chunk); ``check_codec_memory`` (MSTAR_MAX_SPEECH_CODEC_BYTES at load) refuses a bound
    below it, naming the knob."""
    from mstar.worker.codec_node import check_codec_memory

    need = voice.codec_state_bytes()
    for step in _outputs("c", _frames(3, 30), [1] * 30):
        (out,) = speech_out.sound([step])
        codec = speech_out.codec.streams.get("c")
        held = 0 if codec is None else sum(frame.nbytes for frame in codec.held)
        audio = 0 if out.new_audio is None else len(out.new_audio.samples)
        assert 0 < held + audio <= need
    check_codec_memory(voice, need)
    with pytest.raises(ValueError, match="MSTAR_MAX_SPEECH_CODEC_BYTES"):
        check_codec_memory(voice, need - 1)
