"""CUDA graphs for the decode forward (MSTAR_CUDA_GRAPH, MSTAR_CUDA_GRAPH_BATCH_SIZES).

A decode step's cost on a GPU is mostly Python and kernel launches; a captured graph replays the
whole forward as one launch. A graph is captured per batch size over static input buffers; a
decode batch of ``n`` sequences is copied into the first ``n`` rows of those buffers and replays
the graph of the next captured size. The padding rows have context length 0 and cache slot -1, so
the Triton attention backend (the only graph-safe one: its metadata holds no step-dependent host
values) skips their K/V writes and outputs zeros for them. Prefill and mixed steps run eagerly.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

import structlog
import torch
from tqdm import tqdm

from mstar.engine.attention import AttentionInputs
from mstar.engine.state_cache import state_layers

log = structlog.get_logger(__name__)

LADDER_START = (1, 2, 4, 8)


def default_batch_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, then steps of 8 up to 64 and of 16 beyond, ending at ``max_num_seqs``."""
    sizes = [s for s in LADDER_START if s <= max_num_seqs]
    size = sizes[-1]
    while size < max_num_seqs:
        size = min(size + (8 if size < 64 else 16), max_num_seqs)
        sizes.append(size)
    return sizes


def capture_batch_sizes(settings) -> list[int]:
    """The sizes to capture: MSTAR_CUDA_GRAPH_BATCH_SIZES up to MSTAR_MAX_NUM_SEQS, else the ladder."""
    if settings.cuda_graph_batch_sizes is None:
        return default_batch_sizes(settings.max_num_seqs)
    return sorted({s for s in settings.cuda_graph_batch_sizes if s <= settings.max_num_seqs})


def use_cuda_graphs(settings, device: torch.device, attention_backend: str) -> bool:
    """Graphs need CUDA and the Triton attention backend; on CPU the knobs have no effect."""
    return settings.cuda_graph and device.type == "cuda" and attention_backend == "triton"


def padded_batch_size(sizes: list[int], num_seqs: int) -> int | None:
    """The smallest captured size that holds ``num_seqs`` sequences; None: run eagerly."""
    i = bisect.bisect_left(sizes, num_seqs)
    return sizes[i] if i < len(sizes) else None


class StaticDecodeInputs:
    """The input buffers every captured graph reads, sized for the largest graph."""

    def __init__(self, max_batch: int, max_blocks_per_seq: int, block_size: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        def zeros(*shape):
            return torch.zeros(shape, dtype=torch.int64, device=device)

        self.block_size, self.dtype = block_size, dtype
        self.input_ids = zeros(max_batch)
        self.positions = zeros(max_batch)
        self.slot_mapping = torch.full((max_batch,), -1, dtype=torch.int64, device=device)
        self.block_tables = zeros(max_batch, max_blocks_per_seq)
        self.context_lens = zeros(max_batch)

    def attention_inputs(self, batch_size: int) -> AttentionInputs:
        """A decode batch over the first ``batch_size`` rows, for a backend to build metadata from
        at capture time (the host-side lengths are unknown then and unused by graph-safe backends)."""
        return AttentionInputs(
            slot_mapping=self.slot_mapping[:batch_size],
            block_tables=self.block_tables[:batch_size],
            context_lens=self.context_lens[:batch_size],
            query_lens=[1] * batch_size,
            context_lens_list=[0] * batch_size,
            num_decodes=batch_size,
            block_size=self.block_size,
            dtype=self.dtype,
            seq_keys=list(range(batch_size)),
        )

    def load(self, input_ids: torch.Tensor, positions: torch.Tensor, inputs: AttentionInputs,
             batch_size: int) -> None:
        """Copy a decode batch into the first rows (device to device, no host sync) and make rows
        up to ``batch_size`` padding. Block-table columns past the batch's width keep stale ids;
        the kernels read only the blocks a row's context length covers."""
        n = input_ids.numel()
        self.input_ids[:n].copy_(input_ids, non_blocking=True)
        self.positions[:n].copy_(positions, non_blocking=True)
        self.slot_mapping[:n].copy_(inputs.slot_mapping, non_blocking=True)
        self.context_lens[:n].copy_(inputs.context_lens, non_blocking=True)
        self.block_tables[:n, : inputs.block_tables.shape[1]].copy_(inputs.block_tables,
                                                                    non_blocking=True)
        self.slot_mapping[n:batch_size].fill_(-1)
        self.context_lens[n:batch_size].fill_(0)


class DecodeGraphRunner:
    """Decode forwards captured per batch size and replayed over ``StaticDecodeInputs``.

    ``forward(input_ids, positions, attn_metadata)`` returns one row per sequence (e.g. the
    logits). The row block ``run`` returns is the graph's own output: the next replay overwrites
    it, so consume it (sample) on the same stream before the next ``run``. Off CUDA there is no
    graph: a "replay" calls ``forward`` eagerly over the same static buffers.
    """

    def __init__(self, forward: Callable, backend, static: StaticDecodeInputs,
                 sizes: list[int]) -> None:
        self.forward = forward
        self.backend = backend
        self.static = static
        self.sizes = sorted(sizes)
        self.replays: dict[int, Callable[[], torch.Tensor]] = {}
        self.pool = None

    @torch.inference_mode()
    def capture(self, device: torch.device) -> dict:
        """Capture every size, largest first so the smaller graphs reuse its memory pool; returns
        (and logs) how many, how long and how much device memory they took."""
        start = time.perf_counter()
        on_cuda = device.type == "cuda"
        free_before = torch.cuda.mem_get_info(device)[0] if on_cuda else 0
        if on_cuda:
            self.pool = torch.cuda.graph_pool_handle()
        for size in tqdm(sorted(self.sizes, reverse=True), desc="capturing CUDA graphs",
                         disable=not on_cuda):
            self.replays[size] = self._capture_one(size, on_cuda)
        used = free_before - torch.cuda.mem_get_info(device)[0] if on_cuda else 0
        stats = {"graphs": len(self.replays), "seconds": round(time.perf_counter() - start, 2),
                 "mib": round(used / (1 << 20), 1)}
        log.info("cuda_graphs_captured", sizes=self.sizes, **stats)
        return stats

    def _capture_one(self, size: int, on_cuda: bool) -> Callable[[], torch.Tensor]:
        static = self.static
        args = (static.input_ids[:size], static.positions[:size],
                self.backend.build(static.attention_inputs(size)))
        if not on_cuda:
            return lambda: self.forward(*args)
        # Warm up on a side stream: lazy initialisation and Triton compilation must not be captured.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.forward(*args)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.forward(*args)

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor,
            inputs: AttentionInputs) -> torch.Tensor | None:
        """The forward's rows for a decode-only batch, or None when no graph fits (run eagerly)."""
        n = input_ids.numel()
        size = padded_batch_size(self.sizes, n)
        if size is None or inputs.num_decodes != n:
            return None
        self.static.load(input_ids, positions, inputs, size)
        return self.replays[size]()[:n]


def decode_graphs_for(settings, model, backend, backend_name: str, device: torch.device,
                      dtype: torch.dtype, max_model_len: int) -> DecodeGraphRunner | None:
    """The model runner's decode graphs (logits of every row), not yet captured; None when graphs
    are off, not on CUDA, not on the triton backend, or no size is left to capture; also for
    hybrid models, whose recurrent-state layout the static inputs do not carry."""
    sizes = capture_batch_sizes(settings)
    if not sizes or not use_cuda_graphs(settings, device, backend_name):
        return None
    if state_layers(model):
        log.info("cuda_graphs_off", reason="the model has recurrent-state (linear-attention) layers")
        return None
    block_size = settings.kv_block_size
    static = StaticDecodeInputs(sizes[-1], -(-max_model_len // block_size), block_size, dtype, device)

    def logits(input_ids, positions, attn_metadata):
        return model.compute_logits(model(input_ids, positions, attn_metadata))

    return DecodeGraphRunner(logits, backend, static, sizes)
