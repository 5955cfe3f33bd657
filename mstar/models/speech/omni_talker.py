"""Qwen3-Omni's talker, offline: its frame loop, greedy, as transformers' talker ``generate``
makes it, from the talker's inputs (what the thinker hands over, already projected).

The inputs (docs/speech.rst, "Qwen3-Omni": how transformers builds them from the thinker):

- ``prompt`` [T, H]: the talker's prefill embeddings (the user turn's thinker token embeddings
  through ``text_projection``, multimodal positions' thinker hidden states through
  ``hidden_projection``, the assistant turn's first tokens plus the codec's special ids);
- ``text`` [S, H]: one embedding per talker step, the assistant's later thinker tokens through
  ``text_projection``, then ``tts_eos``; after it runs out each step adds ``pad`` (``tts_pad``).

Per step the talker (a Qwen3-MoE decoder with a shared expert, over its own KV cache) makes its
last hidden state; ``codec_head`` picks code 0, the codec's special ids barred but its end id;
the code predictor (``omni_code_predictor``, the per-frame head) adds codes 1..K-1; the frame's
embedding plus the step's ``text`` row is the next input. The loop ends when code 0 is the end
id (that step makes no frame) or after ``max_frames``. The compute modules are transformers'
(read from the checkpoint's ``talker.*`` tensors alone); the loop, the bar and the frame
embedding are here, so they can move into the engine as CSM's did.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator

import torch

from mstar.models.speech.checkpoint import tensors_under
from mstar.models.speech.omni_code_predictor import frame_embeds, residual_codes

TALKER_PREFIX = "talker."
# A checkpoint keeps each expert's projections apart; transformers' module holds them stacked.
EXPERT = re.compile(r"(.+\.experts)\.(\d+)\.(gate|up|down)_proj\.weight")


def stacked_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert ``gate/up/down_proj`` tensors -> the module's ``gate_up_proj`` [E, 2I, H]
    (gate rows first, as its forward splits them) and ``down_proj`` [E, H, I]."""
    out, experts = {}, defaultdict(dict)
    for name, tensor in state.items():
        if found := EXPERT.fullmatch(name):
            experts[found[1]][int(found[2]), found[3]] = tensor
        else:
            out[name] = tensor
    for prefix, parts in experts.items():
        count = 1 + max(e for e, _ in parts)
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat([parts[e, "gate"], parts[e, "up"]]) for e in range(count)])
        out[f"{prefix}.down_proj"] = torch.stack([parts[e, "down"] for e in range(count)])
    return out


def load_talker(model_dir, device: torch.device | None = None,
                dtype: torch.dtype = torch.float32):
    """transformers' ``Qwen3OmniMoeTalkerForConditionalGeneration`` (with its code predictor)
    from the checkpoint's ``talker.*`` tensors; the thinker and code2wav are not read."""
    from transformers import AutoConfig, Qwen3OmniMoeTalkerForConditionalGeneration
    from transformers.initialization import no_init_weights

    config = AutoConfig.from_pretrained(model_dir).talker_config
    with no_init_weights():  # every weight is loaded below
        talker = Qwen3OmniMoeTalkerForConditionalGeneration(config)
    talker.load_state_dict(stacked_experts(tensors_under(model_dir, TALKER_PREFIX)))
    return talker.to(device=device, dtype=dtype).eval().requires_grad_(False)


def barred_codes(talker_config) -> list[int]:
    """The ids code 0 may not take: the codec's special ids (above the codebook) but its end id.
    transformers' Qwen3-Omni ``generate`` bars the talker vocabulary's last 1024 ids but the end
    id, which on the released model (3072 ids, 2048 codes) is this same set."""
    codes = talker_config.code_predictor_config.vocab_size
    end = talker_config.codec_eos_token_id
    return [i for i in range(codes, talker_config.text_config.vocab_size) if i != end]


class TalkerFrames:
    def __init__(self, talker) -> None:
        self.talker = talker  # transformers' talker module, eval
        config = talker.config
        self.end_code = config.codec_eos_token_id
        self.barred = torch.tensor(barred_codes(config), dtype=torch.int64)
        self.codes = talker.model.codec_embedding

    @torch.inference_mode()
    def frames(self, prompt: torch.Tensor, text: torch.Tensor, pad: torch.Tensor,
               max_frames: int) -> Iterator[torch.Tensor]:
        """Each frame (``[K]`` codes) as it is made, from ``prompt`` [T, H], ``text`` [S, H]
        and ``pad`` [H] (see the module's docstring)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.talker.config.text_config)
        hidden = self._step(prompt, cache)
        for step in range(max_frames):
            first = self._code0(hidden)
            if int(first) == self.end_code:
                return
            frame = residual_codes(self.talker.code_predictor, self.codes,
                                   self.talker.config.num_code_groups, hidden, first)
            yield frame[0]
            extra = text[step] if step < len(text) else pad
            hidden = self._step(frame_embeds(self.talker.code_predictor, self.codes, frame) + extra,
                               cache)

    def _step(self, embeds: torch.Tensor, cache) -> torch.Tensor:
        """The talker's last hidden state (after its final norm) once ``embeds`` [n, H] are
        read; its cache grows by them. Positions follow the cache (text-only: the three rotary
        sections share them)."""
        out = self.talker.model(inputs_embeds=embeds.unsqueeze(0), cache=cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def _code0(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.talker.codec_head(hidden)
        logits[:, self.barred.to(logits.device)] = float("-inf")
        return logits.argmax(-1)
