"""What Qwen3-Omni's talker reads from the thinker: its prefill rows, one text row per step and
the pad row (``TalkerFrames.frames``' ``prompt``, ``text``, ``pad``), built as transformers'
``Qwen3OmniMoeForConditionalGeneration.generate`` builds them (docs/speech.rst, "How the talker
consumes the thinker"), for one request.

From the thinker it takes, per position of ``ids`` (the prompt, then the generated tokens): the
input embedding (``embeds``) and the hidden state after ``accept_hidden_layer`` layers
(``hidden``, read only at the prompt's audio, image and video positions), plus the input
embeddings of ``tts_bos``, ``tts_eos`` and ``tts_pad`` (``tts``). The talker's
``text_projection`` and ``hidden_projection`` take them to the talker's width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TalkerInputs:
    prompt: torch.Tensor  # [T, H]: the talker's prefill
    text: torch.Tensor  # [S, H]: one row per talker step, then ``pad``
    pad: torch.Tensor  # [H]


def _roles(ids: list[int], im_start: int) -> list[int]:
    """Each position's turn role: the token after the last ``<|im_start|>`` at or before it
    (transformers' rule, a position before any turn reading position 1)."""
    roles, start = [], -1
    for i, token in enumerate(ids):
        start = i if token == im_start else start
        roles.append(ids[min(max(start, 0) + 1, len(ids) - 1)])
    return roles


def _assistant_start(ids: list[int], im_start: int, assistant: int) -> int:
    """The last ``<|im_start|>assistant`` of the prompt: the turn the talker speaks."""
    return max(i for i in range(len(ids) - 1) if ids[i] == im_start and ids[i + 1] == assistant)


def _user_rows(talker, config, prompt: list[int], embeds, hidden) -> torch.Tensor:
    """The user turns' positions: text through ``text_projection``, media through
    ``hidden_projection`` (projected over all prompt positions, then picked, as transformers
    does: the same rows in one matmul give the same rounding)."""
    thinker = config.thinker_config
    media = torch.tensor([t in (thinker.audio_token_id, thinker.image_token_id,
                                thinker.video_token_id) for t in prompt],
                         device=embeds.device)
    rows = torch.empty(len(prompt), talker.config.text_config.hidden_size, dtype=embeds.dtype,
                       device=embeds.device)
    if media.any():
        rows[media] = talker.hidden_projection(hidden[:len(prompt)][media])
    rows[~media] = talker.text_projection(embeds[:len(prompt)][~media])
    user = [i for i, role in enumerate(_roles(prompt, config.im_start_token_id))
            if role == config.user_token_id]
    return rows[user]


def talker_inputs(talker, config, ids: list[int], prompt_len: int, embeds: torch.Tensor,
                  hidden: torch.Tensor, tts: torch.Tensor, speaker: int) -> TalkerInputs:
    """``talker``: transformers' talker module; ``config``: the model's ``Qwen3OmniMoeConfig``;
    ``ids``: prompt then generated tokens (the first ``prompt_len`` are the prompt, which ends
    with the assistant turn's ``<|im_start|>assistant\\n``); ``embeds`` and ``hidden``: [n,
    thinker width], the positions the thinker read (every id but the last made, which it never
    read: transformers takes them from its ``generate``'s hidden states); ``tts``: [3, thinker
    width], the input embeddings of tts_bos, tts_eos, tts_pad; ``speaker``: the talker's
    speaker id (``talker_config.speaker_id[name]``). The thinker's end token is
    ``config.im_end_token_id`` (Qwen3-Omni's ``<|im_end|>``)."""
    bos, eos, pad = talker.text_projection(tts)
    start = assistant_start(ids[:prompt_len], config)
    said = talker.text_projection(embeds[start:])  # <|im_start|>assistant\n, then the reply
    prompt = prefill_rows(talker, config, ids[:prompt_len], embeds, hidden, said[:4],
                          (bos, pad), speaker)
    return TalkerInputs(prompt, _text_rows(said[4:], ids[prompt_len:], eos, pad,
                                           config.im_end_token_id), pad)


def assistant_start(prompt: list[int], config) -> int:
    """Where the assistant turn the talker speaks opens in ``prompt``."""
    return _assistant_start(prompt, config.im_start_token_id, config.assistant_token_id)


OPENING_ROWS = 9  # the assistant turn's rows in the prefill (``prefill_rows``)


def prefill_length(prompt: list[int], config) -> int:
    """How many rows ``prefill_rows`` makes for ``prompt``: its user turns' positions and the
    assistant turn's opening (known before the thinker runs: admission counts it)."""
    roles = _roles(prompt, config.im_start_token_id)
    return sum(role == config.user_token_id for role in roles) + OPENING_ROWS


def prefill_rows(talker, config, prompt: list[int], embeds: torch.Tensor, hidden: torch.Tensor,
                 opening: torch.Tensor, bos_pad: tuple, speaker: int) -> torch.Tensor:
    """The talker's prefill [T, H]: the user turns' rows, then the assistant turn's opening
    (``opening``: the projected rows of ``<|im_start|>assistant\\n`` and the reply's first
    token, which a reply of one token lacks) beside the codec's think/speaker/bos rows.
    ``embeds``/``hidden``: the thinker's rows at the prompt's positions (at least);
    ``bos_pad``: the projected tts_bos and tts_pad rows."""
    talk = config.talker_config
    bos, pad = bos_pad
    codec = talker.model.codec_embedding(torch.tensor(
        [talk.codec_nothink_id, talk.codec_think_bos_id, talk.codec_think_eos_id, speaker,
         talk.codec_pad_id, talk.codec_bos_id], device=opening.device))
    text_rows = torch.cat([opening[:3], pad.expand(4, -1), bos[None], opening[3:4]])
    codec_rows = torch.cat([torch.zeros(3, codec.shape[1], dtype=codec.dtype,
                                        device=codec.device), codec])
    user = _user_rows(talker, config, prompt, embeds, hidden)
    return torch.cat([user, text_rows + codec_rows])


def _text_rows(later: torch.Tensor, made: list[int], eos, pad, end_id: int) -> torch.Tensor:
    """The reply's tokens after the first, one per talker step, then ``tts_eos``; after the
    thinker's end token (reply token ``e``) row ``e`` is ``tts_eos`` and later rows ``pad``
    (transformers' rule for a reply that ended before the batch's longest)."""
    rows = torch.cat([later, eos[None]])
    if end_id in made:
        end = made.index(end_id)
        rows[end:end + 1] = eos  # none when the end token is the last one made: its row is eos
        rows[end + 1:] = pad
    return rows
