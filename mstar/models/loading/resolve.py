"""Turn the `model` setting into a validated local HF-format model directory.

Validation reads only the file system and config.json, so a bad path fails in milliseconds,
before torch or transformers is imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from mstar.models.loading.builtin import Conversion, ensure_builtin_model
from mstar.models.loading.builtin_whisper import BUILTIN_WHISPER, ensure_builtin_whisper
from mstar.models.loading.hub import hub_id, resolve_hub
from mstar.models.loading.model_error import ModelError
from mstar.models.loading.registry import supported_architectures
from mstar.models.loading.safetensors_check import check_weights
from mstar.settings import BUILTIN_MODEL

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

__all__ = ["BUILTIN_MODEL_NAME", "ModelError", "resolve_model_dir", "validate_model_dir"]

BUILTIN_MODEL_NAME = BUILTIN_MODEL
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
LOCAL_FIX = "re-download the model or save it again with transformers' save_pretrained"


def resolve_model_dir(settings: WorkerSettings, conversion: Conversion | None = None) -> Path:
    """The directory to load `settings.model` from, converting the built-in model on first use
    (by ``conversion``: the GGUF's unless given, builtin.py).

    The built-in name wins over a same-named directory in the working directory; use
    `./SmolLM2-135M-Instruct` to mean the directory. A Hugging Face id (``org/name[@revision]``)
    that is not a local path resolves through the hub cache (``hub``).
    """
    if settings.model == BUILTIN_MODEL_NAME:
        target = ensure_builtin_model(settings.cache_dir, settings.verify_cache, conversion)
        check_weights(target, f"delete {str(target)!r} to convert the built-in model again")
        return target
    if settings.model == BUILTIN_WHISPER:
        target = ensure_builtin_whisper(settings.cache_dir, settings.verify_cache)
        check_weights(target, f"delete {str(target)!r} to convert the built-in model again")
        return target
    hub = hub_id(settings.model)
    if hub is not None:  # org/name[@revision]: the hub cache's snapshot (downloaded if need be)
        return resolve_hub(hub, settings, lambda path: _local_model_dir(path, settings))
    return _local_model_dir(Path(settings.model).expanduser(), settings)


def _local_model_dir(path: Path, settings: WorkerSettings) -> Path:
    """A local GGUF file's model directory, or a checked HF-format directory."""
    if path.name.endswith(".gguf"):
        from mstar.models.loading.gguf_loader import gguf_model_dir

        return gguf_model_dir(path, settings.cache_dir)
    return validate_model_dir(path)


def validate_model_dir(path: Path) -> Path:
    """Check that `path` holds an HF-format model of a supported architecture; return it resolved."""
    supported = ", ".join(supported_architectures())
    hint = f"set model to a local HF-format model directory or to {BUILTIN_MODEL_NAME!r}"
    if not path.exists():
        raise ModelError(f"model path {str(path)!r} does not exist; {hint}")
    if not path.is_dir():
        raise ModelError(f"model path {str(path)!r} is not a directory; {hint}")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelError(f"model directory {str(path)!r} has no config.json; {hint}")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"cannot read {str(config_file)!r}: {error}") from error
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(architectures, list) or not architectures:
        raise ModelError(
            f"{str(config_file)!r} does not name the model's architectures; supported "
            f"architectures: {supported}"
        )
    unsupported = [name for name in architectures if name not in supported_architectures()]
    if unsupported:
        raise ModelError(
            f"model {str(path)!r} has unsupported architecture {', '.join(map(str, unsupported))}; "
            f"supported architectures: {supported}"
        )
    if not any(path.glob("*.safetensors")):
        raise ModelError(
            f"model directory {str(path)!r} has no *.safetensors weights "
            "(.bin/.pt checkpoints are not loaded; convert them with transformers' save_pretrained)"
        )
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelError(
            f"model directory {str(path)!r} has no tokenizer files "
            f"(expected one of {', '.join(TOKENIZER_FILES)})"
        )
    check_weights(path, LOCAL_FIX)
    return path.resolve()
