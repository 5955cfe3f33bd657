"""The LoRA adapters the server offers, each a model name whose parent is the base model.

Filled from MSTAR_LORA_MODULES at start and changed by /v1/load_lora_adapter and
/v1/unload_lora_adapter (``native.lora_routes``) once every replica has applied the change, so a
request never names an adapter a worker lacks. Only the API server's event loop touches it.
"""

from __future__ import annotations

from mstar.settings.knobs.lora import parse_lora_modules


class AdapterNames:
    def __init__(self, lora_modules: str | None) -> None:
        self.paths: dict[str, str] = parse_lora_modules(lora_modules)  # name -> path

    def __contains__(self, name: object) -> bool:
        return name in self.paths

    def names(self) -> list[str]:
        return list(self.paths)

    def add(self, name: str, path: str) -> None:
        self.paths[name] = path

    def remove(self, name: str) -> None:
        self.paths.pop(name, None)
