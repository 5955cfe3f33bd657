"""A replica's side of run-time LoRA loading: apply a ``LoraUpdate`` to the engine, between
steps, and say how it went (the API server adds or drops the model name once all replicas did)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mstar.ipc import messages as m

if TYPE_CHECKING:
    from mstar.engine.llm_engine import LLMEngine


def apply_lora_update(engine: LLMEngine, msg: m.LoraUpdate, worker: int) -> m.LoraUpdated:
    """Load (``msg.path`` set) or unload; a refusal is its HTTP status and the reason."""
    try:
        if msg.path:
            engine.load_lora(msg.name, Path(msg.path))
        else:
            engine.unload_lora(msg.name)
    except KeyError:
        return m.LoraUpdated(msg.update_id, worker, 404,
                             f"The LoRA adapter '{msg.name}' is not loaded")
    except ValueError as exc:  # AdapterError too: the adapter cannot run on this model
        return m.LoraUpdated(msg.update_id, worker, 400, str(exc))
    return m.LoraUpdated(msg.update_id, worker, 200)
