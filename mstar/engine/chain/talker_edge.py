"""The streaming edge from Qwen3-Omni's thinker to its talker, per request: the thinker's outputs
(``RequestOutput.thinker_rows``) in, the talker's ``RowFeed`` out, with exactly the rows
transformers' ``generate`` builds (``omni_talker_inputs``; docs/speech.rst), one rule each:

- the prefill (``prefill_rows``) once the reply's first token is out and known not to be its last
  (the thinker reads it): the user turns' rows and the assistant turn's opening;
- each later token the thinker reads (every token but the reply's last) appends its projected
  embedding (``text_projection``) as the next step's row;
- at the thinker's finish, ``tts_eos``, then ``finish()``: later steps read ``tts_pad``.

The projections and the codec embedding are transformers' modules with the checkpoint's
``talker.*`` tensors (the talker's decoder is the engine's; the thinker's embedding table is the
thinker engine's model's). Everything runs under ``inference_mode`` on the thinker's device.
"""

from __future__ import annotations

import numpy as np
import torch

from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.outputs import RequestOutput
from mstar.engine.runner.thinker_rows import rows_array
from mstar.models.speech.checkpoint import tensors_under
from mstar.models.speech.omni_talker_inputs import assistant_start, prefill_rows
from mstar.models.speech.row_feed import RowFeed

EDGE_PREFIX = "talker."
EDGE_PARTS = ("text_projection.", "hidden_projection.", "model.codec_embedding.")


class EdgeModules(torch.nn.Module):
    """The talker's parts the edge runs: ``text_projection``, ``hidden_projection`` and
    ``model.codec_embedding`` (named as in transformers' talker, which ``prefill_rows`` reads)."""

    def __init__(self, talker_config) -> None:
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
            Qwen3OmniMoeTalkerResizeMLP,
        )

        super().__init__()
        text = talker_config.text_config
        self.config = talker_config
        self.text_projection = Qwen3OmniMoeTalkerResizeMLP(talker_config)
        self.hidden_projection = Qwen3OmniMoeTalkerResizeMLP(talker_config)
        self.model = torch.nn.Module()
        self.model.codec_embedding = torch.nn.Embedding(text.vocab_size, text.hidden_size)

    @classmethod
    def load(cls, model_dir, talker_config, device, dtype) -> EdgeModules:
        module = cls(talker_config)
        tensors = tensors_under(model_dir, EDGE_PREFIX)
        module.load_state_dict({k: v for k, v in tensors.items() if k.startswith(EDGE_PARTS)})
        return module.to(device=device, dtype=dtype).eval().requires_grad_(False)


def speaker_id(config, speaker: str) -> int:
    """The talker's id of the voice ``speaker`` (case-insensitive); a rejection naming
    ``speaker`` for a voice the model does not have."""
    voices = config.talker_config.speaker_id
    if speaker.lower() not in voices:
        raise RequestRejected(f"unknown voice {speaker!r}; this model speaks as "
                              f"{', '.join(sorted(voices))}", "speaker")
    return voices[speaker.lower()]


def opening_of(prompt: list[int], config) -> int:
    """Where the spoken assistant turn opens: the prompt must end with ``<|im_start|>assistant``
    and one more token (its newline), as Qwen3-Omni's chat template ends a prompt; any other is
    a rejection naming ``prompt``."""
    opens = [i for i in range(len(prompt) - 1) if prompt[i] == config.im_start_token_id
             and prompt[i + 1] == config.assistant_token_id]
    if not opens or opens[-1] != len(prompt) - 3:
        raise RequestRejected("a spoken reply needs a chat prompt that ends with the assistant "
                              "turn's opening (<|im_start|>assistant and a newline)", "prompt")
    return assistant_start(prompt, config)


class TalkerEdge:
    """The edge's state for one request: made at its admission, fed each thinker output."""

    def __init__(self, edge: EdgeModules, config, embed, prompt: list[int],
                 speaker: int) -> None:
        """``edge``: the loaded modules; ``config``: the model's ``Qwen3OmniMoeConfig``;
        ``embed``: the thinker's input embedding (ids tensor -> rows); ``prompt``: the
        request's prompt ids (ending with the assistant turn's opening)."""
        self.edge, self.config, self.embed = edge, config, embed
        self.prompt, self.speaker = prompt, speaker
        self.start = opening_of(prompt, config)
        self.feed: RowFeed | None = None  # made with the prefill
        self.opening: list[torch.Tensor] = []  # the reply's first row, until the prefill
        self.media: tuple[list[int], np.ndarray] = ([], np.zeros((0, 0), np.float32))
        self.ended = False  # the thinker finished (the feed is finished, if made)

    @torch.inference_mode()
    def take(self, out: RequestOutput) -> RowFeed | None:
        """One thinker output of the request; the feed when this output made its prefill."""
        rows = out.thinker_rows
        made = self._rows(rows.embeds, rows.width) if rows is not None else None
        if rows is not None and rows.media_positions:
            self.media = (rows.media_positions, rows_array(rows.hidden, rows.width))
        read = len(out.new_token_ids) - (1 if out.finished else 0)  # the last is never read
        new = made[:max(read, 0)] if made is not None else None
        started = None
        if new is not None and len(new):
            if self.feed is None:
                started = self._start(new[:1])
                new = new[1:]
            if len(new):
                self.feed.append(self.edge.text_projection(new))
        if out.finished:
            self.ended = True
            if self.feed is None:  # a reply of one token: transformers' rows do not fit
                return None
            self.feed.append(self._tts()[1][None])
            self.feed.finish()
        return started

    def _rows(self, data: bytes, width: int) -> torch.Tensor:
        param = self.edge.text_projection.linear_fc1.weight
        return torch.from_numpy(rows_array(data, width).copy()).to(param.device, param.dtype)

    def _tts(self) -> torch.Tensor:
        """The projected tts_bos, tts_eos, tts_pad rows."""
        c = self.config
        ids = [c.tts_bos_token_id, c.tts_eos_token_id, c.tts_pad_token_id]
        return self.edge.text_projection(self._embed(ids))

    def _embed(self, ids: list[int]) -> torch.Tensor:
        param = self.edge.text_projection.linear_fc1.weight
        return self.embed(torch.tensor(ids, device=param.device)).to(param.dtype)

    def _start(self, first: torch.Tensor) -> RowFeed:
        """The prefill, from the prompt and the reply's first token's row."""
        embeds = self._embed(self.prompt)
        hidden = torch.zeros_like(embeds)
        positions, rows = self.media
        if positions:
            hidden[positions] = torch.from_numpy(rows.copy()).to(hidden)
        opening = self.edge.text_projection(torch.cat([embeds[self.start:], first]))
        bos, _, pad = self._tts()
        prompt = prefill_rows(self.edge, self.config, self.prompt, embeds, hidden, opening,
                              (bos, pad), self.speaker)
        self.feed = RowFeed(prompt, pad)
        return self.feed
