"""Loads the model, owns the KV cache and the persistent input batch, and runs each step."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mstar.engine.attention import (
    choose_attention_backend,
    get_backend,
    model_attention_features,
)
from mstar.engine.kv.kv_cache import (
    allocate_kv_cache,
    attention_layers,
    block_bytes,
    memory_budget,
    num_blocks_for,
)
from mstar.engine.kv.state_cache import allocate_state_cache, num_slots_for, slot_bytes, state_layers
from mstar.engine.placement import resolve_kv_dtype
from mstar.engine.runner.classify_head import classifier_head
from mstar.engine.runner.compilation import compile_model
from mstar.engine.runner.cross_hooks import (
    cross_states_for,
    no_speech_for,
    row_histories,
    warmup_cross,
    whisper_rules_for,
)
from mstar.engine.runner.encoder_cache import EncoderCache
from mstar.engine.runner.encoder_nodes import EncoderNodes
from mstar.engine.runner.input_batch import InputBatch, StepTensors
from mstar.engine.runner.placeholder_embeds import merged_embeds, placeholders_in_step
from mstar.engine.runner.pooling import Pooler
from mstar.engine.runner.rope_positions import RopePositions
from mstar.engine.runner.step_attention import StepAttention, on_device
from mstar.engine.runner.thinker_rows import ThinkerRowsHead
from mstar.engine.sampling.batch import RowAdd, SamplingBatch
from mstar.engine.sampling.sampler import Sampler, SamplingStep
from mstar.engine.schedule.scheduler_output import EncoderCounts, RunnerOutput, SchedulerOutput
from mstar.engine.speculative.draft_rows import DraftRows
from mstar.engine.speculative.mtp_proposer import MtpProposer
from mstar.engine.speculative.state_rollback import StateSnapshot
from mstar.graph.kinds import NodeKind
from mstar.graph.placement import nodes_apart
from mstar.models.families.parallel import TensorParallel
from mstar.models.loading.loader import load_model
from mstar.models.loading.registry import model_entry
from mstar.models.loading.shipped import weights_quantization
from mstar.models.lora.slots import LoraSlots, check_lora_supported
from mstar.models.speech.frame_heads import frame_head
from mstar.settings import WorkerSettings
from mstar.settings.checks.auto_precision import serves_lora


class ModelRunner:
    def __init__(self, settings: WorkerSettings, model_dir, hf_config, device: torch.device,
                 dtype: torch.dtype, max_model_len: int,
                 parallel: TensorParallel | None = None, mtp_head: bool = False,
                 placed_nodes: dict[str, Callable] | None = None) -> None:
        """``mtp_head``: speculative decoding with the model's MTP head (``MtpProposer``), which
        the runner makes on its model and feeds after every forward. ``placed_nodes``: the calls
        of the encoder nodes MSTAR_ENCODER_PLACEMENT runs in a process of their own."""
        self.device = device
        self.dtype = dtype
        self.block_size = settings.kv_block_size
        # The architecture's one declaration: its walk graph and the features it needs.
        self.entry = model_entry(hf_config)
        self.graph = self.entry.graph
        self.language_model = self.graph.language_model  # the one it runs (the first walk's)
        lora = serves_lora(settings)
        if lora:
            check_lora_supported(settings)
        # MSTAR_QUANTIZATION as resolved for this model (auto: shipped or none)
        self.quantization = weights_quantization(settings, model_dir, device)
        self.model = load_model(model_dir, hf_config, device, dtype, prepack=not settings.compile,
                                quantization=self.quantization,
                                cache_dir=settings.cache_dir,
                                parallel=parallel,
                                lora_slots=(settings.max_loras, settings.max_lora_rank) if lora
                                else None)
        # LoRA adapters (mstar.models.lora): their slots; None when none are served.
        self.lora = LoraSlots.at_start(self.model, settings) if lora else None
        if settings.compile:
            compile_model(self.model, settings.recompile_limit)
        # Hybrid models: recurrent-state slots come out of the cache budget before the KV cache.
        budget = memory_budget(settings, device)
        per_slot = slot_bytes(self.model, dtype)
        self.num_state_slots = num_slots_for(settings, per_slot, budget)
        if self.num_state_slots:
            allocate_state_cache(self.model, self.num_state_slots, device, dtype)
        attn_layers = attention_layers(self.model)
        # MSTAR_KV_CACHE_DTYPE: bf16 under float32 activations where the linears are quantized
        self.kv_dtype = resolve_kv_dtype(settings, device, dtype, self.quantization)
        per_block = block_bytes(len(attn_layers), self.block_size,
                                attn_layers[0].num_kv_heads, attn_layers[0].head_dim,
                                self.kv_dtype)
        self.num_blocks = num_blocks_for(settings, per_block, max_model_len,
                                         budget - self.num_state_slots * per_slot)
        self.attn_backend = get_backend(choose_attention_backend(
            settings, device,
            model_attention_features(self.model, self.entry.bidirectional_image_attention)))
        self.kv_cache = allocate_kv_cache(self.model, self.attn_backend, self.num_blocks,
                                          self.block_size, device, self.kv_dtype)
        self.sampler = Sampler(SamplingBatch(settings.max_num_seqs,
                                             hf_config.get_text_config().vocab_size, device,
                                             settings.seed))
        self.batch = InputBatch(settings.max_num_seqs, max_model_len, self.block_size)
        # The graph's encoder nodes, each called through it (outputs cached by content hash).
        self.encoders = EncoderNodes(self.graph, self.model, EncoderCache(
            int(settings.encoder_cache_mb * (1 << 20)), device), placed_nodes,
            nodes_apart(settings.encoder_placement, self.graph, NodeKind.ENCODER))
        # M-RoPE models: per-request position tables (else each token's index is its position).
        self.rope_positions = (RopePositions(self.model) if self.entry.rope_position_table
                               else None)
        # Each step's attention metadata (image tokens both ways in prefill: Gemma 3).
        self.attention = StepAttention(self.attn_backend, self.batch, self.block_size, device,
                                       dtype, bool(self.num_state_slots),
                                       self.entry.bidirectional_image_attention)
        self.pooler = Pooler(classifier_head(self.model, model_dir, hf_config,
                                             settings.score_tokens))
        # Encoder-decoder (Whisper): the kept cross-attention states and the model's logits rules.
        self.cross = cross_states_for(self.encoders, self.model, hf_config, dtype,
                                      settings.max_num_seqs)
        self.logits_rules = whisper_rules_for(self.cross, model_dir, hf_config, device)
        self.no_speech = no_speech_for(self.logits_rules)
        self.mtp = (MtpProposer(self.model, model_dir, settings, device, dtype, max_model_len)
                    if mtp_head else None)
        # Speech models (its language model streams to a codec node: CSM, Qwen3-Omni's talker,
        # ``WalkGraph.speaks_frames``; not Qwen3-Omni's thinker, which streams text): each frame
        # position's input is its frame's embedding, and the model's frame head (CSM's depth
        # decoder, the talker's code predictor) makes each sampled row's frame. None for the
        # rest, chosen here once: a text model's step never looks further.
        self.frames = (frame_head(self.model, model_dir, hf_config, device, dtype)
                       if self.graph.speaks_frames else None)
        # Qwen3-Omni's thinker: the talker's rows, for the requests that ask; None for the rest.
        self.thinker_rows = ThinkerRowsHead(self.model) if self.entry.thinker_rows else None

    def _sampling_step(self, out: SchedulerOutput, removed: list[int],
                       step: StepTensors) -> SamplingStep:
        """The step's sampling rows: the persistent batch's slots of the sampled rows, and the
        sampling batch's row changes, which travel with the step (applied in step order)."""
        added = [RowAdd(self.batch.slot_of[r.seq_no], r.params, list(r.token_ids[:r.num_prompt_tokens]),
                        list(r.token_ids[r.num_prompt_tokens:]), r.generator, r.sampling_state)
                 for r in out.new]
        return SamplingStep(list(step.sample_slots), removed, added, DraftRows.of(out.rows))

    def _state_snapshot(self, out: SchedulerOutput) -> StateSnapshot | None:
        """Hybrid models: the state slots of the rows verifying drafts, to roll back."""
        if not self.num_state_slots or not any(row.draft_token_ids for row in out.rows):
            return None
        batch = self.batch
        slots = [batch.requests[batch.slot_of[row.seq_no]].state_slot for row in out.rows]
        return StateSnapshot(state_layers(self.model), out.rows, slots)

    @torch.inference_mode()
    def warmup(self) -> None:
        """A tiny prefill then decode in block 0 (still free) so lazy kernel set-up happens now."""
        n = self.block_size
        ctx = n
        for q in sorted({n, 1}, reverse=True):  # prefill of block 0, then a decode in it
            attn_metadata = self.attention.warmup(q, ctx)
            attn_metadata.begin_forward()
            hidden = self.model(on_device([0] * q, self.device),
                                on_device(list(range(ctx - q, ctx)), self.device),
                                attn_metadata, **warmup_cross(self.cross, self.model.config,
                                                              self.device, self.dtype, q))
            self.model.compute_logits(hidden[-1:]).argmax(-1).tolist()

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> RunnerOutput:
        """Apply the step's diffs to the persistent batch, run the forward, sample one token per
        sampled row and record it in the batch (the next step's input, if it continues). A
        pooling request's last row is sampled too (its token is dropped) and also pooled."""
        removed = [self.batch.slot_of[k] for k in out.removed if k in self.batch.slot_of]
        self.batch.apply(out)
        self.pooler.apply(out)
        if self.rope_positions is not None:
            self.rope_positions.apply(out)
        step = self.batch.tensors(out)
        started = self.sampler.begin(self._sampling_step(out, removed, step))  # masks fill now
        attn_metadata = self.attention.build(out, step)
        snapshot = self._state_snapshot(out)
        attn_metadata.begin_forward()
        input_ids = step.input_ids.to(self.device, non_blocking=True)
        positions = step.positions
        if self.rope_positions is not None:
            positions = self.rope_positions.step(out, positions)
        positions = positions.to(self.device, non_blocking=True)
        images = placeholders_in_step(self.batch, out, self.encoders) if self.graph.encoders else None
        encoder = None
        if self.lora is not None:
            self.lora.begin(self._row_adapters(out), step.query_lens, self.device)
        if self.cross is not None:  # encoder-decoder: each row attends to its request's audio
            encoder = EncoderCounts()
            hidden = self.model(input_ids, positions, attn_metadata,
                                cross=self.cross.step(out, encoder))
        elif images:
            encoder = EncoderCounts()
            embeds = merged_embeds(self.model, self.encoders, images, input_ids, encoder)
            wanted = (None if self.thinker_rows is None
                      else self.thinker_rows.media_in_step(self.batch, out))
            hidden = (self.thinker_rows.forward(wanted, input_ids, positions, attn_metadata,
                                                embeds) if wanted
                      else self.model(input_ids, positions, attn_metadata, inputs_embeds=embeds))
        elif self.frames is not None:  # speech: text and frame embeddings, per position
            self.frames.apply(out)
            hidden = self.model(input_ids, positions, attn_metadata,
                                inputs_embeds=self.frames.embeds(out, input_ids))
        else:
            hidden = self.model(input_ids, positions, attn_metadata)
        if self.lora is not None:
            self.lora.end()
        pooled = self.pooler.pool(out, step.query_lens, hidden)
        no_speech = ({} if self.no_speech is None
                     else self.no_speech.step(out, hidden, self.model.compute_logits))
        if started is None:
            self._feed_mtp(out, step.input_ids, hidden, [])
            return RunnerOutput([], pooled=pooled, encoder=encoder, no_speech=no_speech)
        sampled = hidden[step.sample_indices.to(self.device, non_blocking=True)]
        logits = self.model.compute_logits(sampled)
        if self.logits_rules is not None:
            logits = self.logits_rules.apply(logits, row_histories(self.batch, step))
        tokens, logprobs = self.sampler.sample(logits, started)
        token_ids = tokens.tolist()
        if snapshot is not None:
            snapshot.restore_rejected(token_ids)
        self._feed_mtp(out, step.input_ids, hidden, token_ids)
        self.batch.record(step, token_ids)
        frames = {} if self.frames is None else self.frames.after_sample(out, sampled, token_ids)
        thinker_rows = ({} if self.thinker_rows is None
                        else self.thinker_rows.after_sample(self.batch, out, token_ids))
        return RunnerOutput(token_ids, logprobs, step.sample_slots, pooled, encoder, no_speech,
                            frames, thinker_rows)

    def _row_adapters(self, out: SchedulerOutput) -> list[str | None]:
        """Each row's LoRA adapter (None = the base model), in row order."""
        batch = self.batch
        return [batch.requests[batch.slot_of[row.seq_no]].params.lora for row in out.rows]

    def _feed_mtp(self, out: SchedulerOutput, input_ids, hidden, token_ids: list[int]) -> None:
        if self.mtp is not None:
            self.mtp.after_step(out, input_ids, hidden, token_ids, self._token_at)

    def _token_at(self, seq_no: int, position: int) -> int:
        return int(self.batch.token_ids[self.batch.slot_of[seq_no], position])
