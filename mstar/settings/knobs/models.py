"""Several models in one server (docs/models_many.rst): which models, the per-model env files,
how long an idle model stays loaded, the memory budget and how long a request waits for a load.

None of these is reloadable: the model pool is built once when the server starts.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pydantic import BaseModel

from mstar.settings.knobs.field import MAX_WAIT_S, knob
from mstar.settings.knobs.lora import ADAPTER_NAME

_models = functools.partial(knob, category="Several models")

MODEL_NAME = ADAPTER_NAME  # a model's name is a name in the API, as an adapter's is
NEVER_UNLOAD = -1.0  # keep_alive below zero: never unloaded for idleness (Ollama's meaning)
MAX_BUDGET_MB = 1e9  # the largest MSTAR_MODELS_MEMORY_BUDGET_MB (a petabyte)


def parse_models(text: str | None) -> dict[str, str]:
    """``name=source,name=source`` as {name: source}; a ValueError names the knob and the bad
    pair. A source is what ``mstar serve MODEL`` takes (a directory, a .gguf file, the built-in
    model's name or a Hugging Face id)."""
    pairs: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, source = (s.strip() for s in part.partition("="))
        if not sep or not source:
            raise ValueError(f"MSTAR_MODELS: {part.strip()!r} is not name=source")
        if not MODEL_NAME.match(name):
            raise ValueError(f"MSTAR_MODELS: model name {name!r}: letters, digits and ._:/- only")
        if name in pairs:
            raise ValueError(f"MSTAR_MODELS: model name {name!r} is given twice")
        pairs[name] = source
    return pairs


class ModelsKnobs(BaseModel):
    models: str | None = _models(
        None, "Serve several models: name=source pairs separated by commas (a source is what "
        "'mstar serve MODEL' takes). Each model is its own replica group, loaded on its first "
        "request and unloaded when idle; a request's 'model' field picks it. Unset: one model "
        "(MSTAR_MODEL), as before.")
    models_env_dir: Path | None = _models(
        None, "A directory of per-model env files: <name>.env overrides the settings of model "
        "<name> (over the main env files and the environment, below command-line flags; the same "
        "rules and errors as the main env file). A model "
        "without one runs with the main settings.")
    models_keep_alive_s: float = _models(
        300.0, "How long a loaded model stays loaded after its last request ended; a request's "
        "'keep_alive' field (Ollama's) sets it for that model from then on; a model's env file "
        "may set its own. Negative: never unloaded for idleness; 0: unloaded as soon as it is "
        "idle.", unit="s",
        ge=NEVER_UNLOAD, le=MAX_WAIT_S)
    models_memory_budget_mb: float = _models(
        0.0, "The most memory the loaded models may take together (each counted by the size of "
        "its weight files). Loading one more evicts idle models, least recently used first; a "
        "model with requests in flight is never evicted. 0: no budget.", unit="MiB",
        ge=0.0, le=MAX_BUDGET_MB)
    models_load_wait_s: float = _models(
        60.0, "How long a request waits for its model to load (or to make room under the "
        "budget); past it the request gets a 503 with Retry-After, and the load goes on. A "
        "model's env file may set its own.",
        unit="s", gt=0.0, le=MAX_WAIT_S)
