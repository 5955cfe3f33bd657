"""The tiny random Qwen3-Omni the speech tests share (float32, built in code, no hub): every part
of ``Qwen3OmniMoeForConditionalGeneration`` at toy size (the thinker with its audio and vision
encoders, the talker with its code predictor, code2wav), saved with ``save_pretrained``.

Sizes are the smallest each part's code accepts: the MoE layers keep 4 experts (2 picked), the
talker's shared expert is declared (its config has no default for it), the mrope sections sum to
half of each head (text 8 -> [1, 1, 2], talker 6 -> [1, 1, 1]), and code2wav upsamples 2 x 2 x 2,
so a frame is ``SAMPLES_PER_FRAME`` samples. The build and save take well under a second.
"""

from __future__ import annotations

import math

import torch

CODE_GROUPS = 4  # codebooks per frame (the talker's first code, the code predictor's K-1 others)
CODEBOOK = 32  # codes per codebook
SAMPLES_PER_FRAME = 8  # code2wav's upsampling: upsample_rates 2 x 2, upsampling_ratios 2
EXTRA_IDS = 16  # special text ids placed after the tokenizer's vocabulary
# Samples the tiny code2wav's upsampling cuts at each window's end (omni_code2wav), as
# transformers' chunked_decode cuts them
CODEC_CUT = 6
# code2wav's weights are drawn again at this gain over sqrt(fan-in): transformers' own init
# gives a near-silent decoder (peak 4e-5 here) whose samples barely depend on the codes; at 0.5
# the peak is about 0.1 (no sample reaches the +-1 clamp), and a window with one frame less of
# left context moves the samples by 2-3% of the peak, so a wrong window cannot pass as rounding.
CODE2WAV_GAIN = 0.5
# The talker's expert weights and router are drawn at this gain over sqrt(fan-in) (see
# _draw_talker_moe): at transformers' 0.02 the experts add so little that the greedy codes do not
# change when they are shuffled, so a talker test could not see a wrong expert.
TALKER_MOE_GAIN = 1.0
# The talker's text_projection and hidden_projection (thinker width -> talker width), drawn at
# this gain: at transformers' 0.02 they shrink the thinker's rows to about 1e-5, so the talker's
# codes would not depend on what the thinker said.
PROJECTION_GAIN = 1.0
ROPE = dict(rope_type="default", rope_theta=10000.0, interleaved=True)


SPECIALS = ("im_start", "im_end", "tts_pad", "tts_bos", "tts_eos", "system", "user",
            "assistant", "audio", "image", "video", "audio_start", "vision_start",
            "talker_audio_start")
# The saved tokenizer's chat template: Qwen3-Omni's turns (``<|im_start|>user\n...``) in the
# config's ids, the role a token of its own as the talker reads it (the token after
# ``<|im_start|>``); a real checkpoint's are ordinary vocabulary ids, the tiny one's are past it.
OMNI_CHAT_TEMPLATE = (
    "{% for m in messages %}<|omni_im_start|><|omni_{{ m['role'] }}|>\n{{ m['content'] }}"
    "<|omni_im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|omni_im_start|><|omni_assistant|>\n{% endif %}")


def _specials(text_vocab: int) -> dict[str, int]:
    return {name: text_vocab + i for i, name in enumerate(SPECIALS)}


def omni_tokenizer(tokenizer, path):
    """``tokenizer`` saved under ``path`` with Qwen3-Omni's special tokens added at the config's
    ids (``_specials``: ``<|omni_im_start|>`` ...), a chat template that renders them (so a
    served chat request's prompt has the turns the talker reads) and ``<|omni_im_end|>`` as its
    EOS (a real checkpoint's ``<|im_end|>``: where ``OmniSpeaker.answer`` stops too), saved as
    an audio processor with the thinker tests' feature extractor (``clip_extractor``: the API
    server loads a model's processor for audio in; the released ``Qwen3OmniMoeProcessor`` needs
    torchvision for its video part); returns it as reloaded."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer, Qwen2AudioProcessor

    ids = _specials(len(tokenizer))
    tokenizer.save_pretrained(path)
    omni = AutoTokenizer.from_pretrained(path)
    omni.add_tokens([AddedToken(f"<|omni_{name}|>", special=True) for name in SPECIALS],
                    special_tokens=True)
    got = {name: omni.convert_tokens_to_ids(f"<|omni_{name}|>") for name in SPECIALS}
    assert got == ids, got
    omni.chat_template = OMNI_CHAT_TEMPLATE
    omni.eos_token = "<|omni_im_end|>"
    Qwen2AudioProcessor(feature_extractor=clip_extractor(), tokenizer=omni,
                        chat_template=OMNI_CHAT_TEMPLATE).save_pretrained(path)
    return omni


POSITIONS = 512  # the thinker's and the talker's max_position_embeddings


def _thinker(vocab: int, ids: dict[str, int], positions: int = POSITIONS) -> dict:
    text = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                max_position_embeddings=positions,
                rope_parameters=dict(ROPE, mrope_section=[1, 1, 2]))
    audio = dict(num_mel_bins=16, encoder_layers=1, encoder_attention_heads=2,
                 encoder_ffn_dim=32, d_model=16, output_dim=32, max_source_positions=64,
                 n_window=4, n_window_infer=8, conv_chunksize=16, downsample_hidden_size=8)
    vision = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                  out_hidden_size=32, patch_size=4, spatial_merge_size=2,
                  temporal_patch_size=2, num_position_embeddings=16,
                  deepstack_visual_indexes=[0])
    return dict(text_config=text, audio_config=audio, vision_config=vision,
                audio_token_id=ids["audio"], image_token_id=ids["image"],
                video_token_id=ids["video"], audio_start_token_id=ids["audio_start"],
                user_token_id=ids["user"], vision_start_token_id=ids["vision_start"])


def _talker(ids: dict[str, int], positions: int = POSITIONS) -> dict:
    codec = {name: CODEBOOK + i for i, name in enumerate(
        ("eos", "pad", "bos", "nothink", "think_bos", "think_eos", "speaker"))}
    text = dict(vocab_size=CODEBOOK + EXTRA_IDS, hidden_size=24, intermediate_size=48,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=6,
                moe_intermediate_size=12, shared_expert_intermediate_size=12, num_experts=4,
                num_experts_per_tok=2, max_position_embeddings=positions,
                rope_parameters=dict(ROPE, mrope_section=[1, 1, 1]))
    predictor = dict(vocab_size=CODEBOOK, hidden_size=24, intermediate_size=48,
                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=6, num_code_groups=CODE_GROUPS, max_position_embeddings=64)
    return dict(text_config=text, code_predictor_config=predictor, num_code_groups=CODE_GROUPS,
                thinker_hidden_size=32, accept_hidden_layer=1, spatial_merge_size=2,
                codec_eos_token_id=codec["eos"], codec_pad_id=codec["pad"],
                codec_bos_id=codec["bos"], codec_nothink_id=codec["nothink"],
                codec_think_bos_id=codec["think_bos"], codec_think_eos_id=codec["think_eos"],
                speaker_id={"ethan": codec["speaker"]}, audio_token_id=ids["audio"],
                image_token_id=ids["image"], video_token_id=ids["video"],
                vision_start_token_id=ids["vision_start"],
                audio_start_token_id=ids["talker_audio_start"])


def _code2wav() -> dict:
    return dict(codebook_size=CODEBOOK, hidden_size=16, num_attention_heads=2,
                num_key_value_heads=2, sliding_window=8, intermediate_size=32,
                num_hidden_layers=2, num_quantizers=CODE_GROUPS, upsample_rates=[2, 2],
                upsampling_ratios=[2], decoder_dim=16, max_position_embeddings=1024)


def omni_config(text_vocab: int, positions: int = POSITIONS):
    """A tiny ``Qwen3OmniMoeConfig``; its special text ids follow ``text_vocab``; ``positions``:
    the thinker's and the talker's context."""
    from transformers import Qwen3OmniMoeConfig

    ids = _specials(text_vocab)
    return Qwen3OmniMoeConfig(
        thinker_config=_thinker(text_vocab + EXTRA_IDS, ids, positions),
        talker_config=_talker(ids, positions),
        code2wav_config=_code2wav(), im_start_token_id=ids["im_start"],
        im_end_token_id=ids["im_end"], tts_pad_token_id=ids["tts_pad"],
        tts_bos_token_id=ids["tts_bos"], tts_eos_token_id=ids["tts_eos"],
        system_token_id=ids["system"], user_token_id=ids["user"],
        assistant_token_id=ids["assistant"])


def _redraw(module: torch.nn.Module, gain: float) -> None:
    """Every weight matrix (not the code embedding) drawn at ``gain / sqrt(fan_in)``; the
    layer scales set to 1 so the transformer layers add more than a trace."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            if param.dim() > 1 and "embedding" not in name:
                param.normal_(0.0, gain / math.sqrt(param[0].numel()))
            elif name.endswith("layer_scale.scale"):
                param.fill_(1.0)


def _draw_talker_moe(talker, gain: float) -> None:
    """The talker's expert weights and router, drawn at ``gain / sqrt(fan_in)``. transformers'
    ``_init_weights`` covers the thinker's MoE blocks but not the talker's: its experts keep
    ``torch.empty``'s memory (so two builds differ, and after other allocations they can hold
    large garbage) and its router stays zero (every token routed to the first experts)."""
    with torch.no_grad():
        for layer in talker.model.layers:
            moe = layer.mlp
            for param in (moe.experts.gate_up_proj, moe.experts.down_proj, moe.gate.weight):
                param.normal_(0.0, gain / math.sqrt(param.shape[-1]))


def _draw_shared_experts(talker, gain: float) -> None:
    """The talker's shared experts and their sigmoid gates, drawn at ``gain / sqrt(fan_in)``:
    at transformers' 0.02 the shared expert adds so little that dropping its gate (scaling it
    by 1, not by about 0.5) leaves the greedy codes as they were."""
    with torch.no_grad():
        for layer in talker.model.layers:
            moe = layer.mlp
            for param in (*moe.shared_expert.parameters(), moe.shared_expert_gate.weight):
                param.normal_(0.0, gain / math.sqrt(param.shape[-1]))


def save_tiny_omni(path, tokenizer, seed: int = 0, shared_expert_gain: float | None = None,
                   positions: int = POSITIONS):
    """A tiny random Qwen3-Omni saved with ``tokenizer`` (its specials added at the config's
    ids: ``omni_tokenizer``) under ``path``; returns the path. ``shared_expert_gain``: the
    talker's shared experts drawn at it (``_draw_shared_experts``); None: transformers' init, as
    the offline tests have it. ``positions``: the thinker's and the talker's context
    (``omni_config``)."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(omni_config(len(tokenizer), positions)).eval()
    _draw_talker_moe(model.talker, TALKER_MOE_GAIN)
    _redraw(model.code2wav, CODE2WAV_GAIN)
    for projection in (model.talker.text_projection, model.talker.hidden_projection):
        _redraw(projection, PROJECTION_GAIN)
    if shared_expert_gain is not None:
        _draw_shared_experts(model.talker, shared_expert_gain)
    model.save_pretrained(path)
    omni_tokenizer(tokenizer, path)
    return path


def random_codes(frames: int, seed: int = 0) -> torch.Tensor:
    """``[frames, CODE_GROUPS]`` random codes, as the talker makes them (one frame a step)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, CODEBOOK, (frames, CODE_GROUPS), generator=generator)


def talker_inputs(talker_config, seed: int, prompt_len: int = 9, text_len: int = 12):
    """Random talker inputs in its hidden size: ``prompt`` [T, H] (the prefill embeddings),
    ``text`` [S, H] (one row per step) and ``pad`` [H], as ``TalkerFrames.frames`` takes them
    (the thinker's part, already projected: docs/speech.rst)."""
    hidden = talker_config.text_config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(prompt_len, hidden, generator=generator),
            torch.randn(text_len, hidden, generator=generator),
            torch.randn(hidden, generator=generator))


def talker_reference(talker, prompt, text, pad, max_frames: int) -> torch.Tensor:
    """transformers' greedy talker frames [frames, K] for the same inputs: its ``generate`` with
    the kwargs Qwen3-Omni's ``generate`` passes (end id, barred codec ids), greedy and without
    the repetition penalty (a sampling choice). It makes ``max_frames + 1`` codes 0 for
    ``max_frames`` frames: a frame's other codes are made at the next step's input."""
    from mstar.models.speech.omni_talker import barred_codes

    config = talker.config
    out = talker.generate(
        inputs_embeds=prompt[None], trailing_text_hidden=text[None], tts_pad_embed=pad[None, None],
        talker_input_ids=torch.zeros(1, len(prompt), dtype=torch.int64),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
        max_new_tokens=max_frames + 1, do_sample=False, eos_token_id=config.codec_eos_token_id,
        suppress_tokens=barred_codes(config), output_hidden_states=True,
        return_dict_in_generate=True)
    frames = [step[-1][0] for step in out.hidden_states if step[-1] is not None]
    return torch.stack(frames) if frames else torch.zeros(0, CODE_GROUPS, dtype=torch.int64)


# The thinker's audio encoder reads mel frames in windows of 2 x AUDIO_WINDOW: transformers
# counts a whole window's rows as 13 (``_get_feat_extract_output_lengths``), right only at the
# n_window=50 of Qwen's checkpoints and processor, so the thinker tests use that (omni_config's
# 4 makes a clip over 8 frames index past its encoder's rows).
AUDIO_WINDOW = 50
# The thinker's weights (decoder, experts, router, audio encoder) drawn at this gain over
# sqrt(fan-in) (see _draw_thinker): at transformers' 0.02 the layers add so little to the
# embeddings that the greedy tokens barely depend on attention, the experts or the audio.
THINKER_GAIN = 1.0


def _draw_thinker(thinker, gain: float) -> None:
    """Every weight matrix of the thinker's decoder and audio encoder (not the vision one) at
    ``gain / sqrt(fan_in)``: a linear's fan-in is its last dim, as is a fused expert stack's
    [experts, out, in]; a convolution's is its input channels times its kernel."""
    with torch.no_grad():
        for part in (thinker.model.language_model, thinker.lm_head,
                     thinker.model.audio_tower):
            for param in part.parameters():
                if param.dim() > 1:
                    fan_in = param.shape[-1] if param.dim() == 3 else param[0].numel()
                    param.normal_(0.0, gain / math.sqrt(fan_in))
        # transformers' ln_post weight of 1 leaves a clip's rows so alike that a clip of over
        # ~20 rows pulls every reply to one repeated token; random scales keep them apart.
        thinker.model.audio_tower.ln_post.weight.normal_(0.0, gain)


def save_tiny_thinker(path, tokenizer, seed: int = 0):
    """``save_tiny_omni``'s model with the thinker's encoder windows at ``AUDIO_WINDOW`` (so its
    clips may run longer than one window), its weights drawn at ``THINKER_GAIN`` and
    ``<|im_end|>`` as its generation end: the thinker tests' model (talker and code2wav as
    ``save_tiny_omni`` draws them). Returns the path."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(seed)
    config = omni_config(len(tokenizer))
    audio = config.thinker_config.audio_config
    audio.n_window, audio.n_window_infer = AUDIO_WINDOW, 4 * AUDIO_WINDOW
    model = Qwen3OmniMoeForConditionalGeneration(config).eval()
    _draw_talker_moe(model.talker, TALKER_MOE_GAIN)
    _redraw(model.code2wav, CODE2WAV_GAIN)
    for projection in (model.talker.text_projection, model.talker.hidden_projection):
        _redraw(projection, PROJECTION_GAIN)
    _draw_thinker(model.thinker, THINKER_GAIN)
    # The reply's end: the engine stops at the ids generation_config.json names (a real
    # checkpoint's tokenizer has <|im_end|> as its EOS; the tiny one's specials are past it).
    model.generation_config.eos_token_id = config.im_end_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def clip_extractor():
    """The thinker tests' feature extractor: Whisper's, at the tiny encoder's 16 mel bins."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=16, sampling_rate=16_000, hop_length=160,
                                   n_fft=400)


def thinker_prompt(config, words: list[int], clips: list) -> tuple[list[int], list]:
    """A user turn (each clip as ``<audio_start> <audio>*rows 9``, then ``words``) and the
    assistant's opening; the clips' ``AudioInput``s at their placeholder positions."""
    from mstar.models.audio.inputs import AudioInput
    from mstar.models.audio.prompt import qwen3_omni_clip
    from mstar.models.vision.inputs import content_hash

    start, end = config.im_start_token_id, config.im_end_token_id
    audio = config.thinker_config.audio_token_id
    ids, parts = [start, config.user_token_id], []
    for wave in clips:
        tensors, rows = qwen3_omni_clip(clip_extractor(), wave)
        ids.append(config.thinker_config.audio_start_token_id)
        parts.append(AudioInput(content_hash(tensors), tensors,
                                tuple(range(len(ids), len(ids) + rows)), len(wave) / 16_000))
        ids += [audio] * rows + [9]
    return ids + [*words, end, start, config.assistant_token_id, 7], parts


def thinker_generate(model, ids: list[int], parts: list, max_new: int):
    """transformers' greedy thinker ``generate`` (hidden states kept), ending at
    ``<|im_end|>``: the clips' features padded to the longest, with the mask its processor
    makes."""
    kwargs = {}
    if parts:
        feats = [p.tensors["input_features"][0] for p in parts]
        longest = max(f.shape[-1] for f in feats)
        kwargs["input_features"] = torch.stack(
            [torch.nn.functional.pad(f, (0, longest - f.shape[-1])) for f in feats])
        kwargs["feature_attention_mask"] = torch.stack(
            [(torch.arange(longest) < f.shape[-1]).long() for f in feats])
    with torch.inference_mode():
        return model.thinker.generate(
            input_ids=torch.tensor([ids]), max_new_tokens=max_new, do_sample=False,
            eos_token_id=model.config.im_end_token_id, output_hidden_states=True,
            return_dict_in_generate=True, **kwargs)


def save_talker_node(omni_dir, path):
    """The tiny Qwen3-Omni's checkpoint as the engine's talker model: the same files, the
    config naming ``Qwen3OmniMoeTalkerForConditionalGeneration`` (the registry's talker entry,
    which builds from ``talker_config`` and reads the ``talker.*`` tensors)."""
    import json
    import shutil
    from pathlib import Path

    shutil.copytree(omni_dir, path, dirs_exist_ok=True)
    config_file = Path(path) / "config.json"
    config = json.loads(config_file.read_text())
    config["architectures"] = ["Qwen3OmniMoeTalkerForConditionalGeneration"]
    config_file.write_text(json.dumps(config))
    return path
