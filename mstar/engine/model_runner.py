"""Loads the model, owns the KV cache, and runs one scheduled batch on the device."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.attention import AttentionInputs, get_backend
from mstar.engine.compilation import compile_model
from mstar.engine.kv_cache import allocate_kv_cache, block_bytes, num_blocks_for
from mstar.engine.sampler import Sampler, SamplingMetadata
from mstar.engine.scheduler import ScheduledBatch
from mstar.models.loader import load_model


@dataclass
class ModelInput:
    batch: ScheduledBatch
    input_ids: torch.Tensor
    positions: torch.Tensor
    attn_metadata: object
    sample_indices: torch.Tensor  # rows of the flattened tokens whose logits are sampled
    sampling: SamplingMetadata | None


class ModelRunner:
    def __init__(self, settings, model_dir, hf_config, device: torch.device,
                 dtype: torch.dtype, max_model_len: int) -> None:
        self.device = device
        self.dtype = dtype
        self.block_size = settings.kv_block_size
        self.model = load_model(model_dir, hf_config, device, dtype, prepack=not settings.compile,
                                quantization=settings.quantization, cache_dir=settings.cache_dir)
        if settings.compile:
            compile_model(self.model, settings.recompile_limit)
        attn = self.model.model.layers[0].self_attn
        per_block = block_bytes(len(self.model.model.layers), self.block_size,
                                attn.num_kv_heads, attn.head_dim, dtype)
        self.num_blocks = num_blocks_for(settings, device, per_block, max_model_len)
        self.attn_backend = get_backend("torch")
        self.kv_cache = allocate_kv_cache(self.model, self.attn_backend, self.num_blocks,
                                          self.block_size, device, dtype)
        self.sampler = Sampler()

    def _tensor(self, data, dtype=torch.int64) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype).to(self.device, non_blocking=True)

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        starts = [seq.num_computed_tokens for seq in batch.seqs]
        input_ids = [
            seq.token_ids[start : start + n]
            for seq, start, n in zip(batch.seqs, starts, batch.num_new_tokens, strict=True)
        ]
        return self._prepare(batch, starts, input_ids)

    def prepare_continuation(self, batch: ScheduledBatch, block_manager) -> ModelInput | None:
        """Plan the step after ``batch`` before it has run: one more token per sampled sequence.

        Lets a worker build step N+1 while step N executes. ``input_ids`` are placeholders
        the caller replaces with step N's sampled token ids (same order) before ``execute``.
        Returns None when nothing is sampled or the KV cache cannot hold the extra tokens.
        """
        seqs, starts = [], []
        for i, seq in enumerate(batch.seqs):
            if batch.samples(i):
                seqs.append(seq)
                starts.append(seq.num_computed_tokens + batch.num_new_tokens[i])
        totals = [start + 1 for start in starts]
        if not seqs or not block_manager.can_grow_all(seqs, totals):
            return None
        for seq, total in zip(seqs, totals, strict=True):
            block_manager.grow_to(seq, total)
        continuation = ScheduledBatch(seqs=seqs, num_new_tokens=[1] * len(seqs))
        return self._prepare(continuation, starts, [[0]] * len(seqs))

    def _prepare(self, batch: ScheduledBatch, starts: list[int],
                 new_ids: list[list[int]]) -> ModelInput:
        """Flatten the batch; sequence i computes ``new_ids[i]`` at positions from ``starts[i]``."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        seq_index: list[int] = []
        sample_rows: list[int] = []
        ctx_lens: list[int] = []
        sampled = []
        max_blocks = max(len(s.block_table) for s in batch.seqs)
        tables = [s.block_table + [0] * (max_blocks - len(s.block_table)) for s in batch.seqs]
        for i, (seq, start, ids) in enumerate(zip(batch.seqs, starts, new_ids, strict=True)):
            n = len(ids)
            input_ids += ids
            positions += range(start, start + n)
            seq_index += [i] * n
            ctx_lens.append(start + n)
            if start + n >= len(seq):  # reaches the end (a continuation runs past it)
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
        )
        return ModelInput(
            batch=batch,
            input_ids=self._tensor(input_ids),
            positions=pos.to(self.device, non_blocking=True),
            attn_metadata=self.attn_backend.build(inputs),
            sample_indices=self._tensor(sample_rows),
            sampling=self._sampling_metadata(sampled) if sampled else None,
        )

    @staticmethod
    def _sampling_metadata(seqs) -> SamplingMetadata:
        params = [s.params for s in seqs]
        any_penalty = any(p.repetition_penalty != 1.0 for p in params)
        return SamplingMetadata(
            params=params,
            generators=[s.generator for s in seqs],
            token_ids=[s.token_ids for s in seqs] if any_penalty else [],
            all_greedy=all(p.greedy for p in params),
            any_penalty=any_penalty,
            any_logprobs=any(p.logprobs is not None for p in params),
        )

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
            )
            attn_metadata = self.attn_backend.build(inputs)
            attn_metadata.begin_forward()
            hidden = self.model(self._tensor([0] * q), self._tensor(list(range(ctx - q, ctx))),
                                attn_metadata)
            self.model.compute_logits(hidden[-1:]).argmax(-1).tolist()

    @torch.inference_mode()
    def execute(self, model_input: ModelInput) -> torch.Tensor:
        """Forward pass + sampling; returns one token id per sampled sequence."""
        model_input.attn_metadata.begin_forward()
        hidden = self.model(model_input.input_ids, model_input.positions,
                            model_input.attn_metadata)
        if model_input.sampling is None:
            return torch.empty(0, dtype=torch.int64)
        logits = self.model.compute_logits(hidden[model_input.sample_indices])
        tokens, logprobs = self.sampler(logits, model_input.sampling)
        model_input.batch.logprobs = logprobs
        return tokens
