"""Qwen3.5's MTP head loads from a checkpoint's ``mtp.*`` tensors and gives the logits of a
reference built from transformers' Qwen3.5 modules (transformers has no MTP module of its own):
fc over the normed embedding of token t+1 and the normed hidden state at t, a full-attention
decoder layer, a final norm, the shared lm_head."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

# speculative_gate=False: every proposed draft is verified, whatever this machine's step timings
# (the gate itself: test_speculative_gate.py).


@pytest.fixture(scope="module")
def mtp_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny Qwen3.5 with one MTP layer (random weights) added to its checkpoint, and the
    reference modules holding the same weights."""
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

    path = tmp_path_factory.mktemp("tiny-qwen3_5-mtp")
    shutil.copytree(tiny_model_dir("qwen3_5"), path, dirs_exist_ok=True)
    config_file = path / "config.json"
    config_file.write_text(json.dumps(json.loads(config_file.read_text())
                                      | {"mtp_num_hidden_layers": 1}))
    config = Qwen3_5TextConfig.from_pretrained(path)
    config._attn_implementation = "eager"
    torch.manual_seed(7)
    full = config.layer_types.index("full_attention")
    h = config.hidden_size
    ref = nn.ModuleDict({
        "fc": nn.Linear(2 * h, h, bias=False),
        "pre_fc_norm_embedding": hf.Qwen3_5RMSNorm(h, config.rms_norm_eps),
        "pre_fc_norm_hidden": hf.Qwen3_5RMSNorm(h, config.rms_norm_eps),
        "layer": hf.Qwen3_5DecoderLayer(config, full),
        "norm": hf.Qwen3_5RMSNorm(h, config.rms_norm_eps),
    }).eval()
    with torch.no_grad():
        for p in ref.parameters():  # norms start at zero: give every weight a random value
            p.normal_(0.0, 0.1)
    tensors = {f"mtp.{name.replace('layer.', 'layers.0.', 1)}": t.contiguous()
               for name, t in ref.state_dict().items()}
    save_file(tensors, str(path / "mtp.safetensors"))
    return path, ref, config


def test_mtp_head_logits_match_the_reference(mtp_model_dir, tiny_model_dir, make_engine):
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    from mstar.engine.attention import AttentionInputs
    from mstar.models.families.qwen3_5_mtp import has_mtp_weights, load_mtp_head

    path, ref, config = mtp_model_dir
    ids = torch.tensor([[5, 17, 42, 99, 7, 250, 13, 64, 3, 128, 77]])
    n = ids.shape[1] - 1
    main = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.inference_mode():
        hidden = main.model(ids).last_hidden_state[0, :n]  # h_t, t = 0 .. n-1 (final norm)
        embeds = main.model.embed_tokens(ids[0, 1:])  # tokens t + 1
        cos, sin = Qwen3_5TextRotaryEmbedding(config)(hidden[None], torch.arange(n)[None])
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        u = ref["fc"](torch.cat([ref["pre_fc_norm_embedding"](embeds),
                                 ref["pre_fc_norm_hidden"](hidden)], -1))
        u = ref["layer"](u[None], (cos, sin), attention_mask=mask,
                         position_ids=torch.arange(n)[None])
        want = main.lm_head(ref["norm"](u[0]))

    assert has_mtp_weights(path) and not has_mtp_weights(tiny_model_dir("qwen3_5"))
    runner = make_engine(path, kv_block_size=4, num_kv_blocks=64).model_runner
    model = runner.model
    head = load_mtp_head(model, path)
    attn = head.layers[0].self_attn
    blocks = -(-n // 4)
    attn.kv_cache = torch.zeros(runner.attn_backend.kv_cache_shape(blocks, 4, attn.num_kv_heads,
                                                                   attn.head_dim))
    metadata = runner.attn_backend.build(AttentionInputs(
        slot_mapping=torch.arange(n), block_tables=torch.arange(blocks)[None],
        context_lens=torch.tensor([n]), query_lens=[n], context_lens_list=[n], num_decodes=0,
        block_size=4, dtype=torch.float32, seq_keys=[-1], state_layout=None))
    metadata.begin_forward()
    with torch.inference_mode():
        positions = torch.arange(n)
        rope_cos, rope_sin = model.model.rotary_emb(positions)
        got = model.compute_logits(head(model.model.embed_tokens(ids[0, 1:]), hidden, rope_cos,
                                        rope_sin, metadata))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert (got.argmax(-1) == want.argmax(-1)).all()


MTP = {"speculative_method": "mtp", "speculative_gate": False, "speculative_min_acceptance": 0.0}
PROMPTS = [[5, 17, 42, 99, 7, 250, 13, 64, 3, 128, 77], [9, 8, 7], [300, 1, 300, 1, 300, 1, 300],
           [44] * 19]


def test_mtp_proposer_keeps_greedy_output_and_drafts_as_from_scratch(mtp_model_dir,
                                                                     make_engine, run):
    """MSTAR_SPECULATIVE_METHOD=mtp: the output is what it is without speculation, beside
    chunked prefills; every draft the head proposed from its incremental cache (rolled forward
    past rejected drafts) is the one a fresh run of the head over the whole sequence gives."""
    from mstar.engine.request.sampling_params import SamplingParams

    path, _, _ = mtp_model_dir
    requests = {f"r{i}": (p, SamplingParams(temperature=0.0, max_tokens=16))
                for i, p in enumerate(PROMPTS)}
    settings = {"kv_block_size": 4, "num_kv_blocks": 64, "max_num_batched_tokens": 16}
    plain = run(make_engine(path, **settings), requests)
    engine = make_engine(path, **settings, **MTP)
    mtp = engine.speculation.mtp
    logged = []
    propose = mtp.propose
    mtp.propose = lambda seq: logged.append((list(seq.token_ids), d := propose(seq))) or d
    spec = run(engine, requests)
    assert {k: r["token_ids"] for k, r in spec.items()} == {
        k: r["token_ids"] for k, r in plain.items()}
    stats = engine.speculation.stats
    assert stats.method == "mtp" and stats.proposed > 0 and stats.proposed > stats.accepted
    assert mtp.num_free_blocks == 64 and engine.stats().free_blocks == 64
    drafted = [(tokens, d[0]) for tokens, d in logged if d]
    assert len(drafted) > 10
    from transformers import AutoModelForCausalLM

    main = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    for tokens, draft in drafted[:: max(1, len(drafted) // 8)]:
        assert _from_scratch(main, engine.model_runner.model, mtp.head, tokens) == draft


def _from_scratch(main, model, head, tokens: list[int]) -> int:
    """The head's next-token argmax after ``tokens``, from transformers' hidden states
    (``main``) and a fresh paged cache of the whole sequence."""
    from mstar.engine.attention import AttentionInputs
    from mstar.engine.attention.torch_backend import TorchAttentionBackend

    ids = torch.tensor([tokens])
    n = len(tokens) - 1
    backend = TorchAttentionBackend()
    attn = head.layers[0].self_attn
    blocks = -(-n // 4)
    saved = attn.kv_cache
    attn.kv_cache = torch.zeros(backend.kv_cache_shape(blocks, 4, attn.num_kv_heads,
                                                       attn.head_dim))
    metadata = backend.build(AttentionInputs(
        slot_mapping=torch.arange(n), block_tables=torch.arange(blocks)[None],
        context_lens=torch.tensor([n]), query_lens=[n], context_lens_list=[n], num_decodes=0,
        block_size=4, dtype=torch.float32, seq_keys=[-1]))
    metadata.begin_forward()
    try:
        with torch.inference_mode():
            hidden = main.model(ids).last_hidden_state[0, :n]
            cos, sin = model.model.rotary_emb(torch.arange(n))
            u = head(model.model.embed_tokens(ids[0, 1:]), hidden, cos, sin, metadata)
            return int(model.compute_logits(u[-1:]).argmax(-1))
    finally:
        attn.kv_cache = saved


def test_preflight_takes_mtp_only_with_its_weights(mtp_model_dir, tiny_model_dir, tmp_path):
    """From the files alone: a config naming MTP layers and a checkpoint shipping them."""
    from mstar.settings import WorkerSettings
    from mstar.settings.checks.speculative_checks import speculation_off_reason

    path, _, _ = mtp_model_dir
    named_only = tmp_path / "named-only"
    shutil.copytree(tiny_model_dir("qwen3_5"), named_only)
    (named_only / "config.json").write_text((path / "config.json").read_text())

    def reason(model):
        return speculation_off_reason(WorkerSettings(model=str(model), **MTP),
                                      model / "config.json")

    assert reason(path) is None
    assert "no MTP layers" in reason(tiny_model_dir("llama"))
    assert "no MTP weights" in reason(named_only)
