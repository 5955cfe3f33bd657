"""CSM on a tiny random model, float32, greedy: mstar's frame loop (backbone, then the depth
decoder as the backbone's per-frame head) makes the codes transformers'
``CsmForConditionalGeneration.generate`` makes, and the codec node's windowed Mimi decode (the
walk graph's chunk policy: N frames after L frames of left context) stays within
``WAVE_TOLERANCE`` of transformers' one whole decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mstar.graph.chunks import frame_windows
from mstar.graph.speech import CSM_CHUNK_FRAMES
from mstar.models.speech.codec_node import CodecStream
from mstar.models.speech.speaker import Speaker

CODEBOOKS, CODES = 4, 16
# Largest sample difference allowed against the whole decode, relative to its peak. Each chunk's
# Mimi decode sees only its left context, not everything before it; this tiny Mimi's reach is
# under 2 frames, so with CSM's 8 the windows match to float rounding (measured 1.5e-7 of the
# peak; with no left context 0.74, with 1 frame 0.08). A real Mimi reaches further (its
# transformer attends 250 frames back), which is why the policy's left context is a trade-off.
WAVE_TOLERANCE = 1e-4
PROMPT = [5, 17, 42, 99, 7, 250]


def _config(text_vocab: int):
    from transformers import CsmConfig

    depth = dict(num_codebooks=CODEBOOKS, backbone_hidden_size=32, vocab_size=CODES,
                 hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1,
                 max_position_embeddings=CODEBOOKS + 1)
    mimi = dict(model_type="mimi", hidden_size=16, num_filters=4, upsampling_ratios=[2, 2],
                codebook_size=CODES, codebook_dim=8, num_quantizers=CODEBOOKS,
                vector_quantization_hidden_dimension=8, upsample_groups=16,
                num_hidden_layers=1, intermediate_size=32, num_attention_heads=2,
                num_key_value_heads=2, sliding_window=16)
    return CsmConfig(num_codebooks=CODEBOOKS, vocab_size=CODES, text_vocab_size=text_vocab,
                     hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                     pad_token_id=1, bos_token_id=0, audio_token_id=2, audio_eos_token_id=3,
                     codebook_pad_token_id=CODES - 1, codebook_eos_token_id=0,
                     depth_decoder_config=depth, codec_config=mimi)


@pytest.fixture(scope="module")
def tiny_csm(tmp_path_factory, tiny_tokenizer):
    from transformers import CsmForConditionalGeneration

    torch.manual_seed(0)
    model = CsmForConditionalGeneration(_config(len(tiny_tokenizer))).eval()
    path = tmp_path_factory.mktemp("csm")
    model.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


def _reference(model, ids, frames, audio=False):
    return model.generate(input_ids=torch.tensor([ids]), max_new_tokens=frames, do_sample=False,
                          depth_decoder_do_sample=False, output_audio=audio)


def test_codes_are_transformers_and_the_wave_within_tolerance(tiny_csm):
    speaker = Speaker(tiny_csm)
    frames = 3 * CSM_CHUNK_FRAMES + 2  # whole chunks and a shorter last one
    ours = speaker.speak({"prompt_token_ids": PROMPT}, max_frames=frames)
    codes = _reference(speaker.model, PROMPT, frames)
    assert torch.equal(ours.codes, codes[0])
    (wave,) = _reference(speaker.model, PROMPT, frames, audio=True)
    wave = wave.numpy()
    assert ours.audio.shape == wave.shape == (len(ours.codes) * speaker.samples_per_frame,)
    assert np.abs(ours.audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_text_goes_through_the_models_tokenizer(tiny_csm):
    speaker = Speaker(tiny_csm)
    ids = speaker.prompt_ids("hello world", speaker=1)
    assert ids == speaker.tokenizer.encode("[1]hello world")
    assert torch.equal(speaker.speak("hello world", 1, max_frames=3).codes,
                       _reference(speaker.model, ids, 3)[0])


def test_audio_streams_in_chunks_before_the_last_frame(tiny_csm):
    speaker = Speaker(tiny_csm)
    spf = speaker.samples_per_frame
    sizes = [(i, len(c)) for i, (_, chunks) in
             enumerate(speaker.stream({"prompt_token_ids": PROMPT}, max_frames=10))
             for c in chunks]
    n = CSM_CHUNK_FRAMES
    assert sizes == [(n - 1, n * spf), (2 * n - 1, n * spf), (9, 2 * spf)]


def test_an_end_frame_stops_the_loop_and_is_not_sounded(tiny_csm):
    from transformers import CsmForConditionalGeneration

    model = CsmForConditionalGeneration.from_pretrained(tiny_csm).eval()
    with torch.no_grad():  # every head's logits tie: argmax picks code 0, the end code
        model.lm_head.weight.zero_()
        model.depth_decoder.codebooks_head.weight.zero_()
    ours = Speaker(model).speak({"prompt_token_ids": PROMPT}, max_frames=6)
    assert torch.equal(ours.codes, _reference(model, PROMPT, 6)[0])
    assert ours.codes.tolist() == [[0] * CODEBOOKS] and ours.audio.size == 0


def test_the_codec_node_holds_a_bounded_window_and_decodes_every_frame_once():
    """With a decode that sounds each frame by itself, the chunks join into the whole decode
    exactly, and the node never holds more than the policy's window."""
    policy = frame_windows(3, 2)
    decoded = []

    def decode(codes):
        decoded.append(len(codes))
        return np.repeat(codes[:, 0].numpy().astype(np.float32), 2)

    stream = CodecStream(decode, policy, samples_per_frame=2)
    chunks = []
    for f in range(11):
        chunks += stream.push(torch.tensor([f, 0]))
        assert len(stream.held) <= policy.held_frames
    chunks += stream.finish()
    assert np.array_equal(np.concatenate(chunks), np.repeat(np.arange(11.0), 2))
    assert decoded == [3, 5, 5, 4]  # each window: its left context, then its new frames


def test_left_context_is_what_keeps_the_windows_close_to_the_whole_decode(tiny_csm):
    """The same windows with no left context miss the tolerance: the test above can fail."""
    speaker = Speaker(tiny_csm)
    (wave,) = _reference(speaker.model, PROMPT, 12, audio=True)
    speaker.chunk = frame_windows(CSM_CHUNK_FRAMES, 0)
    bare = speaker.speak({"prompt_token_ids": PROMPT}, max_frames=12).audio
    assert np.abs(bare - wave.numpy()).max() > WAVE_TOLERANCE * np.abs(wave.numpy()).max()


def test_a_speaker_takes_csm_only_and_a_positive_frame_bound(tiny_csm):
    with pytest.raises(ValueError, match="Speaker runs CSM .CsmForConditionalGeneration., not Linear"):
        Speaker(torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="max_frames must be at least 1, not 0"):
        next(Speaker(tiny_csm).stream({"prompt_token_ids": [1]}, max_frames=0))
