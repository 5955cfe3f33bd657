"""MSTAR_ENCODER_PLACEMENT: an encoder node in a process of its own. Preflight checks the map
against the model's walk graph; the node's output comes back over the transport as typed
messages; greedy output is the same token for token with the node colocated and apart."""

from __future__ import annotations

import json
import re

import pytest
import torch
from alm_helpers import clip, make_tiny_alm, prompt_text, transformers_greedy
from media_runs import run_built

from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds, Invalid, check
from mstar.ipc.parts import WireTensor
from mstar.ipc.security import instance_security
from mstar.models.audio.prompt import build_audio_prompt
from mstar.models.loading.placement_check import encoder_placement_problem
from mstar.settings import WorkerSettings

MAX_NEW = 8
PLACED = "audio_encoder=process"


def _model_dir(tmp_path, arch: str):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return tmp_path


@pytest.mark.parametrize("placement, arch, tp, message", [
    (PLACED, "Qwen2AudioForConditionalGeneration", 1, None),
    ("audio_encoder=worker", "WhisperForConditionalGeneration", 1, None),
    ("vision_encoder=process", "Qwen2AudioForConditionalGeneration", 1,
     "places vision_encoder, not a node.*placeable nodes: audio_encoder"),
    ("x=process", "LlamaForCausalLM", 1, "none \\(a text-only model\\)"),
    ("audio_encoder=gpu", "Qwen2AudioForConditionalGeneration", 1, "'audio_encoder=gpu' is not"),
    ("audio_encoder", "Qwen2AudioForConditionalGeneration", 1, "is not node=place"),
    (f"{PLACED},{PLACED}", "Qwen2AudioForConditionalGeneration", 1, "placed twice"),
    (PLACED, "Qwen2AudioForConditionalGeneration", 2, "MSTAR_TENSOR_PARALLEL_SIZE=1"),
])
def test_preflight_checks_the_map_against_the_graph(tmp_path, placement, arch, tp, message):
    settings = WorkerSettings(encoder_placement=placement, tensor_parallel_size=tp)
    problem = encoder_placement_problem(settings, _model_dir(tmp_path, arch))
    if message is None:
        assert problem is None
    else:
        assert problem is not None and "MSTAR_ENCODER_PLACEMENT" in problem
        assert re.search(message, problem), problem


def test_the_node_messages_are_checked_on_arrival():
    bounds = InboxBounds(replicas=1)
    check(m.EncodeRequest(1, {"input_features": WireTensor("float32", [2], bytes(8))}), bounds)
    check(m.EncodedOutput(1, WireTensor("float32", [1, 2], bytes(8))), bounds)
    for bad, field in [(m.EncodeRequest(1, {"x": WireTensor("float32", [3], bytes(8))}),
                        "tensors.x"),
                       (m.EncodeRequest(-1, {}), "call"),
                       (m.EncodedOutput(1, WireTensor("complex", [1], bytes(8))), "output")]:
        with pytest.raises(Invalid, match=field):
            check(bad, bounds)


def test_greedy_output_is_the_same_colocated_and_apart(tmp_path, tiny_tokenizer, make_engine):
    from transformers import AutoProcessor

    from mstar.engine.llm_engine import LLMEngine
    from mstar.worker.encoder_node import EncoderNodeProcess

    path = make_tiny_alm("qwen2_audio", tiny_tokenizer, tmp_path / "qwen2_audio")
    processor = AutoProcessor.from_pretrained(path)
    requests = {"one": (prompt_text(processor, "Describe the sound.", 1), [clip(1)]),
                "two": (prompt_text(processor, "Compare them.", 2), [clip(3, 0.3), clip(4)]),
                "text": (prompt_text(processor, "Paris is in France.", 0), [])}
    built = {rid: build_audio_prompt(processor, *req) for rid, req in requests.items()}
    here = make_engine(path, kv_block_size=4, num_kv_blocks=256)
    colocated = run_built(here, built, MAX_NEW)
    assert colocated["one"] == transformers_greedy(path, *requests["one"], MAX_NEW)

    settings = WorkerSettings(model=str(path), device="cpu", dtype="float32", kv_block_size=4,
                              num_kv_blocks=256, encoder_placement=PLACED)
    with pytest.raises(ValueError, match="MSTAR_ENCODER_PLACEMENT places audio_encoder"):
        LLMEngine(settings)  # only a worker starts the node's process
    node = EncoderNodeProcess(settings, "audio_encoder",
                              instance_security(settings).max_message_bytes)
    try:
        engine = LLMEngine(settings, placed_nodes={"audio_encoder": node})
        assert run_built(engine, built, MAX_NEW) == colocated
        assert node.calls == 3  # each clip once, over the transport
        clip_input = built["one"][1][0].tensors
        rows = node(clip_input)  # bit for bit the in-process node's output
        assert rows.shape == (16, 64)
        assert torch.equal(rows, here.model_runner.encoders.calls["audio_encoder"](clip_input))
        engine.shutdown()
    finally:
        node.close()
    assert node.proc.poll() is not None and not node.dir.exists()


def test_config_validate_names_a_bad_placement(tmp_path):
    import os
    import subprocess
    import sys

    model = _model_dir(tmp_path, "Qwen2AudioForConditionalGeneration")
    (model / "config.json").write_text(json.dumps({
        "architectures": ["Qwen2AudioForConditionalGeneration"], "text_config": {
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 1024, "vocab_size": 400}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env["MSTAR_ENCODER_PLACEMENT"] = "vision_encoder=process"
    done = subprocess.run([sys.executable, "-m", "mstar", "config", "validate", "--model",
                           str(model)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "MSTAR_ENCODER_PLACEMENT" in done.stdout and "placeable nodes: audio_encoder" in \
        done.stdout
    env["MSTAR_ENCODER_PLACEMENT"] = PLACED
    done = subprocess.run([sys.executable, "-m", "mstar", "config", "validate", "--model",
                           str(model)], env=env, capture_output=True, text=True, timeout=120)
    assert "MSTAR_ENCODER_PLACEMENT" not in done.stdout, done.stdout
