"""Vision-language families, model side: mstar's encoder + paged decoder against transformers'
generate (greedy, fp32, CPU) on tiny random models, image processing included."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig
from vlm_helpers import image, make_tiny_vlm, paged_greedy, prompt_text, transformers_greedy

from mstar.models.loading.loader import load_model
from mstar.models.vision.inputs import build_prompt, load_processor

MAX_NEW = 12


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory, tiny_tokenizer):
    made = {}

    def get(family: str):
        if family not in made:
            made[family] = make_tiny_vlm(family, tiny_tokenizer,
                                         tmp_path_factory.mktemp(f"tiny-{family}"))
        return made[family]

    return get


def _mstar(model_dir):
    config = AutoConfig.from_pretrained(model_dir)
    return load_model(model_dir, config, torch.device("cpu"), torch.float32)


FAMILIES = ["smolvlm", "llava_clip", "llava_siglip", "qwen2_5_vl", "gemma3"]
SIZES = {"split": [(48, 40)], "small": [(20, 30)], "two-images": [(48, 40), (30, 60)]}
# The later families run alone and batched through the engine (test_vision_engine.py); here
# their hardest case only: two images of different sizes (two grids, two bidirectional runs).
CASES = [pytest.param(f, sizes, id=f"{name}-{f}") for f in FAMILIES[:3]
         for name, sizes in SIZES.items()]
CASES += [pytest.param(f, SIZES["two-images"], id=f"two-images-{f}") for f in FAMILIES[3:]]


@pytest.mark.parametrize("family,sizes", CASES)
def test_greedy_matches_transformers(family, sizes, vlm_dir):
    path = vlm_dir(family)
    processor = load_processor(path)
    images = [image(i, s) for i, s in enumerate(sizes)]
    text = prompt_text(processor, "Describe the picture.", len(images))
    ids, inputs = build_prompt(processor, text, images)
    expected = transformers_greedy(path, text, images, MAX_NEW)
    assert paged_greedy(_mstar(path), ids, inputs, MAX_NEW) == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_a_different_image_changes_the_answer(family, vlm_dir):
    path = vlm_dir(family)
    processor = load_processor(path)
    model = _mstar(path)
    text = prompt_text(processor, "Describe the picture.", 1)
    answers = set()
    for seed in range(3):
        ids, inputs = build_prompt(processor, text, [image(seed)])
        answers.add(tuple(paged_greedy(model, ids, inputs, MAX_NEW)))
    assert len(answers) > 1
