"""``SamplingBatch``: every running request's sampling parameters and output counts as per-row
tensors, keyed by an integer row slot (0 .. max_rows-1). See ``mstar.engine.sampling`` for the
contract (who calls what, on which thread)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.sampling.state import SamplingState


@dataclass
class RowAdd:
    """``SamplingBatch.add``'s arguments as a value (a row change that travels with a step)."""

    slot: int
    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    generator: torch.Generator | None
    state: SamplingState | None


@dataclass
class _Row:
    """The Python side of one slot: what is not a per-row number."""

    params: SamplingParams
    generator: torch.Generator | None
    state: SamplingState | None
    bias: tuple[torch.Tensor, torch.Tensor] | None  # (token ids, values), built once at add
    early_stop_ids: torch.Tensor | None  # masked while num_output < min_tokens
    num_output: int

    @property
    def penalised(self) -> bool:
        p = self.params
        return (p.repetition_penalty != 1.0 or p.presence_penalty != 0.0
                or p.frequency_penalty != 0.0)


@dataclass
class StepRows:
    """One step's sampled rows in logits order: row ``i`` is slot ``slots[i]``. Position lists
    index rows of the step's logits; tensors are on the batch's device."""

    slots: tuple[int, ...]
    index: torch.Tensor  # the slots
    greedy: list[int]
    sampled: list[int]
    temperature: torch.Tensor  # of the sampled rows, in ``sampled`` order; so are the next three
    top_k: torch.Tensor  # the vocabulary size where off
    top_p: torch.Tensor
    min_p: torch.Tensor
    seeded: list[tuple[int, torch.Generator]]  # (index into ``sampled``, its generator)
    penalised: list[int]
    repetition_rows: bool  # some penalised row has a repetition_penalty
    bias: tuple[torch.Tensor, torch.Tensor] | None  # (flat index into the logits, values)
    min_tokens: list[tuple[int, int]]  # (row, slot) of rows with min_tokens and early-stop ids
    constrained: list[tuple[int, SamplingState]]
    logprobs: list[int | None]  # per row: how many top logprobs, None for none
    any_adjustment: bool  # penalties, logit_bias or min_tokens


class SamplingBatch:
    """Per-slot sampling tensors; the penalties' token counts are kept current by ``record``.

    ``output_counts`` ([max_rows, vocab] int32) and ``prompt_mask`` ([max_rows, vocab] bool) are
    allocated on the first row that needs them; a slot's row is meaningful only while it holds a
    request that asked for penalties. ``seed`` seeds the one generator of every unseeded row.
    """

    def __init__(self, max_rows: int, vocab_size: int, device: torch.device, seed: int) -> None:
        self.max_rows = max_rows
        self.vocab_size = vocab_size
        self.device = device

        def column(value: float, dtype=torch.float32) -> torch.Tensor:
            return torch.full((max_rows,), value, dtype=dtype, device=device)

        self.temperature = column(1.0)
        self.top_k = column(vocab_size, torch.int64)
        self.top_p = column(1.0)
        self.min_p = column(0.0)
        self.repetition_penalty = column(1.0)
        self.presence_penalty = column(0.0)
        self.frequency_penalty = column(0.0)
        self.output_counts: torch.Tensor | None = None
        self.prompt_mask: torch.Tensor | None = None
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self._rows: dict[int, _Row] = {}
        self._cached: StepRows | None = None

    def add(self, slot: int, params: SamplingParams, prompt_token_ids: Sequence[int],
            output_token_ids: Sequence[int] = (), generator: torch.Generator | None = None,
            state: SamplingState | None = None) -> None:
        """Put a request in ``slot`` (replacing whatever was there). ``output_token_ids``: its
        outputs so far (a request resuming after preemption); ``generator``: its own, seeded one
        (kept by the request, so a preempted request continues its random stream)."""
        if not 0 <= slot < self.max_rows:
            raise ValueError(f"slot {slot} outside 0..{self.max_rows - 1}")
        self._cached = None
        top_k = params.top_k if 0 < params.top_k < self.vocab_size else self.vocab_size
        for name, value in (("temperature", params.temperature), ("top_k", top_k),
                            ("top_p", params.top_p), ("min_p", params.min_p),
                            ("repetition_penalty", params.repetition_penalty),
                            ("presence_penalty", params.presence_penalty),
                            ("frequency_penalty", params.frequency_penalty)):
            getattr(self, name)[slot] = value
        row = _Row(params, generator if params.seed is not None else None, state,
                   self._bias(params), self._early_stop_ids(params, state), len(output_token_ids))
        if row.penalised:
            self._count(slot, params, prompt_token_ids, output_token_ids)
        self._rows[slot] = row

    def remove(self, slot: int) -> None:
        """The request in ``slot`` left (finished, aborted or preempted); the slot is free."""
        self._cached = None
        self._rows.pop(slot, None)

    def __contains__(self, slot: int) -> bool:
        return slot in self._rows

    def record(self, rows: StepRows, tokens: torch.Tensor,
               emitted: list[bool] | None = None) -> None:
        """The step sampled ``tokens`` (one per row): count them. ``emitted``: which rows' tokens
        the requests take (speculative decoding: not those after a rejected draft); None: all."""
        if self.output_counts is not None:
            index = rows.index
            if emitted is not None:
                where = torch.tensor([i for i, e in enumerate(emitted) if e], dtype=torch.int64,
                                     device=tokens.device)
                index, tokens = index[where], tokens[where]
            self.output_counts.index_put_((index, tokens),
                                          torch.ones_like(tokens, dtype=torch.int32),
                                          accumulate=True)
        for i, slot in rows.min_tokens:
            if emitted is None or emitted[i]:
                self._rows[slot].num_output += 1

    def min_tokens_pending(self, rows: StepRows, offsets: Sequence[int] | None = None
                           ) -> list[tuple[int, torch.Tensor]]:
        """(row, early-stop ids) of the rows still short of their min_tokens. ``offsets``: draft
        tokens each row counts as output already (speculative decoding)."""
        out = []
        for i, slot in rows.min_tokens:
            row = self._rows[slot]
            if row.num_output + (offsets[i] if offsets else 0) < row.params.min_tokens:
                out.append((i, row.early_stop_ids))
        return out

    def rows(self, slots: Sequence[int]) -> StepRows:
        """The step's view of ``slots`` (cached while no row is added or removed)."""
        key = tuple(slots)
        if self._cached is None or self._cached.slots != key:
            self._cached = self._view(key)
        return self._cached

    def _view(self, slots: tuple[int, ...]) -> StepRows:
        rows = [self._rows[s] for s in slots]
        index = torch.tensor(slots, dtype=torch.int64).to(self.device)
        sampled = [i for i, r in enumerate(rows) if not r.params.greedy]
        picked = index[sampled] if len(sampled) < len(slots) else index
        penalised = [i for i, r in enumerate(rows) if r.penalised]
        min_tokens = [(i, s) for i, (s, r) in enumerate(zip(slots, rows, strict=True))
                      if r.params.min_tokens and r.early_stop_ids is not None]
        return StepRows(
            slots=slots, index=index,
            greedy=[i for i, r in enumerate(rows) if r.params.greedy], sampled=sampled,
            temperature=self.temperature[picked], top_k=self.top_k[picked],
            top_p=self.top_p[picked], min_p=self.min_p[picked],
            seeded=[(k, rows[i].generator) for k, i in enumerate(sampled)
                    if rows[i].generator is not None],
            penalised=penalised,
            repetition_rows=any(rows[i].params.repetition_penalty != 1.0 for i in penalised),
            bias=self._flat_bias(rows),
            min_tokens=min_tokens,
            constrained=[(i, r.state) for i, r in enumerate(rows)
                         if r.state is not None and r.state.grammar is not None],
            logprobs=[r.params.logprobs for r in rows],
            any_adjustment=bool(penalised or min_tokens) or any(r.bias is not None for r in rows),
        )

    def _flat_bias(self, rows: list[_Row]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Every biased row's (token ids, values) as one flat index into the step's logits."""
        parts = [(i, r.bias) for i, r in enumerate(rows) if r.bias is not None]
        if not parts:
            return None
        index = torch.cat([ids + i * self.vocab_size for i, (ids, _) in parts])
        return index, torch.cat([values for _, (_, values) in parts])

    def _bias(self, params: SamplingParams) -> tuple[torch.Tensor, torch.Tensor] | None:
        if not params.logit_bias:
            return None
        ids = torch.tensor(list(params.logit_bias), dtype=torch.int64)
        values = torch.tensor(list(params.logit_bias.values()), dtype=torch.float32)
        return ids.to(self.device), values.to(self.device)

    def _early_stop_ids(self, params: SamplingParams,
                        state: SamplingState | None) -> torch.Tensor | None:
        if not params.min_tokens or state is None or not state.early_stop_ids:
            return None
        return torch.tensor(state.early_stop_ids, dtype=torch.int64).to(self.device)

    def _count(self, slot: int, params: SamplingParams, prompt_token_ids: Sequence[int],
               output_token_ids: Sequence[int]) -> None:
        """Start the slot's token counts: the outputs so far, and the prompt's tokens."""
        if self.output_counts is None:
            self.output_counts = torch.zeros(self.max_rows, self.vocab_size, dtype=torch.int32,
                                             device=self.device)
        counts = self.output_counts[slot]
        counts.zero_()
        if output_token_ids:
            ids = torch.tensor(list(output_token_ids), dtype=torch.int64).to(self.device)
            counts.index_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))
        if params.repetition_penalty != 1.0:
            if self.prompt_mask is None:
                self.prompt_mask = torch.zeros(self.max_rows, self.vocab_size, dtype=torch.bool,
                                               device=self.device)
            self.prompt_mask[slot].zero_()
            ids = torch.tensor(list(prompt_token_ids), dtype=torch.int64)
            self.prompt_mask[slot, ids[ids < self.vocab_size].to(self.device)] = True
