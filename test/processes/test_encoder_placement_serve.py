"""`mstar serve` with the vision encoder node in a process of its own (MSTAR_ENCODER_PLACEMENT):
the official openai client's image chat gives transformers' tokens, as it does colocated; a map
naming a node the model does not have stops the server in preflight, before any worker."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time

import pytest
from serve_helpers import alive, die_with_test, free_port, running_server
from vlm_helpers import image, make_tiny_vlm, prompt_text, transformers_greedy

from mstar.models.vision.inputs import load_processor

MAX_NEW = 12
QUESTION = "Describe the picture."


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory, tiny_tokenizer):
    return make_tiny_vlm("llava_clip", tiny_tokenizer, tmp_path_factory.mktemp("llava"))


def _png(picture) -> str:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_an_image_chat_with_the_encoder_apart_matches_transformers(vlm_dir, tmp_path):
    from openai import OpenAI

    env = {"MSTAR_DTYPE": "float32", "MSTAR_NUM_KV_BLOCKS": "256",
           "MSTAR_ENCODER_PLACEMENT": "vision_encoder=process"}
    server = running_server(vlm_dir, tmp_path / "s.log", env)
    srv = next(server)
    try:
        client = OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        model = client.models.list().data[0]
        assert model.model_extra["modalities"] == ["text", "image"]
        content = [{"type": "image_url", "image_url": {"url": _png(image(1))}},
                   {"type": "text", "text": QUESTION}]
        out = client.chat.completions.create(
            model=model.id, messages=[{"role": "user", "content": content}],
            max_tokens=MAX_NEW, temperature=0)
        processor = load_processor(vlm_dir)
        text = prompt_text(processor, QUESTION, 1)
        want = processor.tokenizer.decode(transformers_greedy(vlm_dir, text, [image(1)], MAX_NEW),
                                          skip_special_tokens=True)
        assert out.choices[0].message.content == want
        assert "encoder_node_ready" in srv.log() and "node=vision_encoder" in srv.log()
        children = srv.children
    finally:
        next(server, None)
    deadline = time.monotonic() + 10  # a loaded machine may take a moment to reap them
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)


def test_serve_refuses_a_placement_the_graph_lacks(vlm_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env |= {"MSTAR_ENCODER_PLACEMENT": "audio_encoder=process", "MSTAR_PORT": str(free_port()),
            "MSTAR_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-m", "mstar", "serve", str(vlm_dir)], env=env,
                          capture_output=True, text=True, timeout=120, preexec_fn=die_with_test)
    log = done.stdout + done.stderr
    assert done.returncode == 1 and "preflight_failed" in log
    assert "places audio_encoder, not a node" in log and "vision_encoder" in log
    assert "starting_workers" not in log and "Traceback" not in log
