"""Loads the model, owns the KV cache, and runs one scheduled batch on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.attention import (
    AttentionInputs,
    choose_attention_backend,
    get_backend,
    model_attention_features,
)
from mstar.engine.compilation import compile_model
from mstar.engine.kv_cache import (
    allocate_kv_cache,
    attention_layers,
    block_bytes,
    memory_budget,
    num_blocks_for,
)
from mstar.engine.outputs import StepResult
from mstar.engine.sampling.batch import SamplingBatch
from mstar.engine.sampling.sampler import Sampler, SamplingStep
from mstar.engine.sampling.slots import SlotTable
from mstar.engine.scheduler import ScheduledBatch
from mstar.engine.state_cache import allocate_state_cache, num_slots_for, slot_bytes
from mstar.models.loader import load_model
from mstar.models.parallel import TensorParallel
from mstar.models.state_layout import StateLayout


@dataclass
class ModelInput:
    batch: ScheduledBatch
    input_ids: torch.Tensor
    positions: torch.Tensor
    attn_metadata: object
    sample_indices: torch.Tensor  # rows of the flattened tokens whose logits are sampled
    sampling: SamplingStep
    input_index: torch.Tensor | None = None  # a continuation's rows in the previous step's tokens


class ModelRunner:
    def __init__(self, settings, model_dir, hf_config, device: torch.device,
                 dtype: torch.dtype, max_model_len: int,
                 parallel: TensorParallel | None = None) -> None:
        self.device = device
        self.dtype = dtype
        self.block_size = settings.kv_block_size
        self.model = load_model(model_dir, hf_config, device, dtype, prepack=not settings.compile,
                                quantization=settings.quantization, cache_dir=settings.cache_dir,
                                parallel=parallel)
        if settings.compile:
            compile_model(self.model, settings.recompile_limit)
        # Hybrid models: recurrent-state slots come out of the cache budget before the KV cache.
        budget = memory_budget(settings, device)
        per_slot = slot_bytes(self.model, dtype)
        self.num_state_slots = num_slots_for(settings, per_slot, budget)
        if self.num_state_slots:
            allocate_state_cache(self.model, self.num_state_slots, device, dtype)
        attn_layers = attention_layers(self.model)
        per_block = block_bytes(len(attn_layers), self.block_size,
                                attn_layers[0].num_kv_heads, attn_layers[0].head_dim, dtype)
        self.num_blocks = num_blocks_for(settings, per_block, max_model_len,
                                         budget - self.num_state_slots * per_slot)
        self.attn_backend = get_backend(choose_attention_backend(
            settings, device, model_attention_features(self.model)))
        self.kv_cache = allocate_kv_cache(self.model, self.attn_backend, self.num_blocks,
                                          self.block_size, device, dtype)
        # Sampling wiring (interim, until the persistent input batch owns the slots): a slot per
        # running sequence; the batch's rows change with the step that carries the change.
        self.sampler = Sampler(SamplingBatch(settings.max_num_seqs,
                                             hf_config.get_text_config().vocab_size, device,
                                             settings.seed))
        self.slots = SlotTable(settings.max_num_seqs)

    def _tensor(self, data, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype).to(self.device, non_blocking=True)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        """Flatten the batch into the step's tensors.

        Rows of a continuation run past the sequence's end: their input ids are not known yet, and
        the caller passes them to ``execute`` (``input_ids``) once the previous step sampled them.
        """
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        seq_index: list[int] = []
        sample_rows: list[int] = []
        ctx_lens: list[int] = []
        sampled = []
        max_blocks = max(len(s.block_table) for s in batch.seqs)
        tables = [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in batch.seqs]
        for i, (seq, start, n) in enumerate(zip(batch.seqs, batch.starts, batch.num_new_tokens,
                                                strict=True)):
            ids = seq.token_ids[start : start + n]
            input_ids += ids + [0] * (n - len(ids))  # 0: placeholder for a continuation's input
            positions += range(start, start + n)
            seq_index += [i] * n
            ctx_lens.append(start + n)
            if batch.samples(i):
                sample_rows.append(len(input_ids) - 1)
                sampled.append(seq)
        block_tables = self._tensor(tables)
        pos = torch.tensor(positions, dtype=torch.int64)
        rows = torch.tensor(seq_index, dtype=torch.int64)
        slots = torch.tensor(tables, dtype=torch.int64)[rows, pos // bs] * bs + pos % bs
        num_decodes = 0
        while num_decodes < len(batch) and batch.num_new_tokens[num_decodes] == 1:
            num_decodes += 1
        inputs = AttentionInputs(
            slot_mapping=slots.to(self.device, non_blocking=True),
            block_tables=block_tables,
            context_lens=self._tensor(ctx_lens),
            query_lens=batch.num_new_tokens,
            context_lens_list=ctx_lens,
            num_decodes=num_decodes,
            block_size=bs,
            dtype=self.dtype,
            seq_keys=[s.seq_no for s in batch.seqs],
            state_layout=self._state_layout(batch, num_decodes) if self.num_state_slots else None,
        )
        return ModelInput(
            batch=batch,
            input_ids=self._tensor(input_ids),
            positions=pos.to(self.device, non_blocking=True),
            attn_metadata=self.attn_backend.build(inputs),
            sample_indices=self._tensor(sample_rows),
            sampling=self._sampling_step(batch, sampled),
            input_index=None if batch.input_rows is None else self._tensor(batch.input_rows),
        )

    def _state_layout(self, batch: ScheduledBatch, num_decodes: int) -> StateLayout:
        """Each sequence's state slot; a span starting at token 0 starts from a zero state."""
        slots = [seq.state_slot for seq in batch.seqs]
        spans, row = [], num_decodes
        for i in range(num_decodes, len(batch)):
            n = batch.num_new_tokens[i]
            spans.append((row, n, slots[i], batch.starts[i] == 0))
            row += n
        starts_fresh = [start == 0 for start in batch.starts[:num_decodes]]
        keep = None
        if any(starts_fresh):  # one-token prompts: their slot still holds a previous owner's state
            keep = self._tensor([[[0.0 if f else 1.0]] for f in starts_fresh], self.dtype)
        return StateLayout(num_decodes, self._tensor(slots[:num_decodes]), keep, spans)

    def _sampling_step(self, batch: ScheduledBatch, sampled) -> SamplingStep:
        """Sampling wiring (interim): a fresh batch (not a continuation) updates the slots."""
        removed, added = self.slots.update(batch.seqs) if batch.input_rows is None else ([], [])
        return SamplingStep([self.slots.slot(s) for s in sampled], removed, added)

    @torch.inference_mode()
    def warmup(self) -> None:
        """A tiny prefill then decode in block 0 (still free) so lazy kernel set-up happens now."""
        n = self.block_size
        ctx = n
        for q in sorted({n, 1}, reverse=True):  # prefill of block 0, then a decode in it
            inputs = AttentionInputs(
                slot_mapping=self._tensor(list(range(ctx - q, ctx))),
                block_tables=self._tensor([[0]]),
                context_lens=self._tensor([ctx]),
                query_lens=[q],
                context_lens_list=[ctx],
                num_decodes=int(q == 1),
                block_size=n,
                dtype=self.dtype,
                seq_keys=[-1],
                # Slot 0 is still free; the prefill starts from a zero state, the decode continues.
                state_layout=StateLayout(int(q == 1), self._tensor([0] * int(q == 1)), None,
                                         [] if q == 1 else [(0, q, 0, True)]),
            )
            attn_metadata = self.attn_backend.build(inputs)
            attn_metadata.begin_forward()
            hidden = self.model(self._tensor([0] * q), self._tensor(list(range(ctx - q, ctx))),
                                attn_metadata)
            self.model.compute_logits(hidden[-1:]).argmax(-1).tolist()

    @torch.inference_mode()
    def execute(self, model_input: ModelInput, input_ids: torch.Tensor | None = None) -> StepResult:
        """Forward pass + sampling: one token id (and logprobs, if asked for) per sampled row.

        ``input_ids`` (the previous step's sampled tokens) replaces a continuation's placeholder
        inputs: known only once that step is done.
        """
        started = self.sampler.begin(model_input.sampling)  # the grammar masks fill meanwhile
        model_input.attn_metadata.begin_forward()
        ids = model_input.input_ids
        if input_ids is not None:
            ids = input_ids.index_select(0, model_input.input_index)
        hidden = self.model(ids, model_input.positions, model_input.attn_metadata)
        if started is None:
            return StepResult(torch.empty(0, dtype=torch.int64))
        logits = self.model.compute_logits(hidden[model_input.sample_indices])
        tokens, logprobs = self.sampler.sample(logits, started)
        return StepResult(tokens, logprobs)
