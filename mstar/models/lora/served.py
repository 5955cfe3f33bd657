"""Whether a run serves LoRA adapters: read by the engine and by the loader's shipped-precision
rule (``mstar.models.loading.shipped``), below the adapter code that imports the loader."""

from __future__ import annotations


def serves_lora(settings) -> bool:
    """Whether the model is built with LoRA slots: adapters at start or run-time loading."""
    return bool(settings.lora_modules) or settings.allow_runtime_lora_updating
