"""The model runner's hooks for encoder-decoder models (Whisper), kept apart from its other work:
the kept cross-attention states (``cross_states``), the model's logits rules
(``mstar.engine.sampling.whisper_rules``), the rows' token histories those rules read and the
no-speech probability (``no_speech``)."""

from __future__ import annotations

from pathlib import Path

import structlog
import torch

from mstar.engine.runner.cross_states import CrossBatch, CrossStates, state_bytes
from mstar.engine.runner.encoder_nodes import EncoderNodes
from mstar.engine.runner.input_batch import InputBatch, StepTensors
from mstar.engine.runner.no_speech import NoSpeech
from mstar.engine.sampling.whisper_rules import RowHistory, WhisperRules
from mstar.graph import EdgeKind, WalkGraph
from mstar.models.audio.whisper_units import no_speech_id

log = structlog.get_logger(__name__)

def takes_cross_states(graph: WalkGraph) -> bool:
    """Whether the model's walk graph feeds its decoder cross-attention states."""
    return any(e.kind is EdgeKind.CROSS_ATTENTION for e in graph.edges)


def cross_states_for(encoders: EncoderNodes, model, hf_config, dtype: torch.dtype,
                     max_num_seqs: int) -> CrossStates | None:
    """The kept states of a graph whose encoder feeds cross-attention (its node called through
    ``encoders``, like every encoder node), or None."""
    if not takes_cross_states(encoders.graph):
        return None
    per_request = state_bytes(hf_config, dtype)
    log.info("cross_states_budget", bytes_per_request=per_request, max_requests=max_num_seqs,
             most_bytes=per_request * max_num_seqs)
    return CrossStates(encoders, model.cross_states)


def whisper_rules_for(cross: CrossStates | None, model_dir: Path, hf_config,
                      device: torch.device) -> WhisperRules | None:
    if cross is None:
        return None
    return WhisperRules.from_model_dir(model_dir, hf_config.vocab_size, device)


def no_speech_for(rules: WhisperRules | None) -> NoSpeech | None:
    """Whisper's no-speech probability, from the tokens its generation config names."""
    if rules is None:
        return None
    return NoSpeech(rules.start, no_speech_id(rules.no_timestamps))


def row_histories(batch: InputBatch, step: StepTensors) -> list[RowHistory]:
    """Each sampled row's decoder prompt and tokens so far, from the persistent batch."""
    rows = []
    for slot, end in zip(step.sample_slots, step.sample_positions, strict=True):
        n = batch.requests[slot].num_prompt_tokens
        ids = batch.token_ids[slot, : end].tolist()
        rows.append(RowHistory(ids[:n], ids[n:]))
    return rows


def warmup_cross(cross: CrossStates | None, config, device: torch.device, dtype: torch.dtype,
                 num_tokens: int) -> dict:
    """The warm-up forward's extra argument: zero states for its one row."""
    if cross is None:
        return {}
    heads = config.decoder_attention_heads
    zeros = torch.zeros(config.decoder_layers, 2, heads, config.max_source_positions,
                        config.d_model // heads, device=device, dtype=dtype)
    return {"cross": CrossBatch([(num_tokens, zeros)])}
