"""CUDA-graph bookkeeping that needs no GPU: sizes, padding, static buffers, the runner's replay."""

from __future__ import annotations

import pytest
import torch

from mstar.engine.attention import AttentionInputs, choose_attention_backend
from mstar.engine.cuda_graphs import (
    DecodeGraphRunner,
    StaticDecodeInputs,
    capture_batch_sizes,
    decode_graphs_for,
    default_batch_sizes,
    padded_batch_size,
    use_cuda_graphs,
)
from mstar.settings import WorkerSettings, load_settings

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_default_ladder():
    assert default_batch_sizes(256) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128,
                                        144, 160, 176, 192, 208, 224, 240, 256]
    assert default_batch_sizes(100) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 100]
    assert default_batch_sizes(3) == [1, 2, 3]
    assert default_batch_sizes(1) == [1]


def test_sizes_from_the_environment():
    def sizes(environ):
        return capture_batch_sizes(load_settings(environ=environ).settings)

    assert sizes({"MSTAR_MAX_NUM_SEQS": "20"}) == [1, 2, 4, 8, 16, 20]
    # Sorted, deduplicated, and sizes a batch can never reach are dropped.
    assert sizes({"MSTAR_CUDA_GRAPH_BATCH_SIZES": "64,8,1,8,512", "MSTAR_MAX_NUM_SEQS": "100"}) == [
        1, 8, 64]


def test_graphs_only_on_cuda_with_triton_attention():
    on, off = WorkerSettings(), WorkerSettings(cuda_graph=False)
    assert use_cuda_graphs(on, CUDA, "triton")
    assert not use_cuda_graphs(on, CPU, "triton")
    assert not use_cuda_graphs(on, CUDA, "torch")
    assert not use_cuda_graphs(off, CUDA, "triton")


def test_no_graph_runner_where_graphs_do_not_apply():
    def runner(device, backend="triton", **knobs):
        return decode_graphs_for(WorkerSettings(**knobs), None, None, backend, device, torch.float32, 512)

    assert runner(CPU) is None
    assert runner(CUDA, backend="torch") is None
    assert runner(CUDA, cuda_graph=False) is None
    assert runner(CUDA, cuda_graph_batch_sizes=[512], max_num_seqs=256) is None


def test_padding_picks_the_next_captured_size():
    sizes = [1, 2, 4, 8, 16]
    assert [padded_batch_size(sizes, n) for n in (1, 3, 4, 5, 16, 17)] == [1, 4, 4, 8, 16, None]


def _decode_inputs(ctx_lens: list[int], block_size: int = 4) -> tuple:
    n = len(ctx_lens)
    width = max(-(-c // block_size) for c in ctx_lens)
    tables = torch.tensor([[10 * i + j for j in range(width)] for i in range(n)])
    slots = torch.tensor([tables[i, (c - 1) // block_size] * block_size + (c - 1) % block_size
                          for i, c in enumerate(ctx_lens)])
    inputs = AttentionInputs(
        slot_mapping=slots, block_tables=tables, context_lens=torch.tensor(ctx_lens),
        query_lens=[1] * n, context_lens_list=ctx_lens, num_decodes=n, block_size=block_size,
        dtype=torch.float32, seq_keys=list(range(n)))
    return torch.arange(100, 100 + n), torch.tensor(ctx_lens) - 1, inputs


class _PassThroughBackend:
    def build(self, inputs):
        return inputs


def _forward(input_ids, positions, meta):
    """Stands in for the model: one row per sequence from everything the graph reads."""
    last_block = meta.block_tables.gather(1, ((meta.context_lens - 1).clamp(min=0) // 4)[:, None])
    return torch.stack([input_ids, positions, meta.slot_mapping, meta.context_lens,
                        last_block[:, 0]], dim=1)


def test_runner_replays_padded_batches_through_static_buffers():
    static = StaticDecodeInputs(max_batch=8, max_blocks_per_seq=6, block_size=4,
                                dtype=torch.float32, device=CPU)
    runner = DecodeGraphRunner(_forward, _PassThroughBackend(), static, sizes=[2, 8])
    assert runner.capture(CPU)["graphs"] == 2
    big = _decode_inputs([9, 21, 3, 4, 5])  # pads to 8
    small = _decode_inputs([2, 6, 7])  # pads to 8 too, over the rows the big batch left behind
    for ids, pos, inputs in (big, small):
        out = runner.run(ids, pos, inputs)
        assert torch.equal(out, _forward(ids, pos, inputs))
        assert static.slot_mapping[len(ids):].eq(-1).all()
        assert static.context_lens[len(ids):].eq(0).all()
    assert runner.run(*_decode_inputs([1, 2])).shape[0] == 2  # exactly a captured size


def test_runner_declines_what_it_has_no_graph_for():
    static = StaticDecodeInputs(4, 4, 4, torch.float32, CPU)
    runner = DecodeGraphRunner(_forward, _PassThroughBackend(), static, sizes=[1, 2])
    runner.capture(CPU)
    assert runner.run(*_decode_inputs([3, 4, 5])) is None  # larger than every graph
    ids, pos, inputs = _decode_inputs([3, 4])
    inputs.num_decodes = 1  # a mixed step (a prefill chunk in it) runs eagerly
    assert runner.run(ids, pos, inputs) is None


def test_attention_backend_choice(monkeypatch):
    from mstar.engine import attention

    def choose(value, device):
        return choose_attention_backend(WorkerSettings(attention_backend=value), device)

    monkeypatch.setattr(attention, "triton_available", lambda: True)
    monkeypatch.setattr(attention, "triton_interpreting", lambda: False)
    assert (choose("auto", CPU), choose("auto", CUDA)) == ("torch", "triton")
    assert (choose("torch", CUDA), choose("triton", CUDA)) == ("torch", "triton")
    with pytest.raises(ValueError, match="triton needs a CUDA device, not cpu"):
        choose("triton", CPU)
    monkeypatch.setattr(attention, "triton_interpreting", lambda: True)
    assert choose("triton", CPU) == "triton"  # the interpreter: slow but correct (tests)
    monkeypatch.setattr(attention, "triton_available", lambda: False)
    assert choose("auto", CUDA) == "torch"
    with pytest.raises(ValueError, match="needs the triton package"):
        choose("triton", CUDA)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need CUDA (scripts/gpu_check.sh)")
def test_graph_tokens_equal_eager_tokens(tiny_model_dir, make_engine, run):
    """Decode batches of 1 to 11 sequences, padded to the captured sizes 1, 2, 4, 8 and 16."""
    from mstar.engine.sampling_params import SamplingParams

    requests = {f"r{i}": ([5 + i] * (3 + 2 * i), SamplingParams(temperature=0, max_tokens=4 + 3 * i,
                                                                ignore_eos=True))
                for i in range(11)}
    model_dir = tiny_model_dir("llama")
    knobs = dict(device="cuda", max_num_seqs=16, cuda_graph_batch_sizes=[1, 2, 4, 8, 16])
    eager = run(make_engine(model_dir, cuda_graph=False, **knobs), requests)
    assert run(make_engine(model_dir, cuda_graph=True, **knobs), requests) == eager
