"""Which adapters are loaded (host memory) and which sit in the model's device slots.

Adapters are read once (at start or at run time) and kept in host memory; ``MSTAR_MAX_LORAS``
slots on the device hold the ones in use. A step's adapters get slots first (the scheduler admits
at most that many distinct adapters among running requests, ``fits_lora_slots``), evicting the
least recently used adapter that the step does not use. Only the thread running the steps calls
``groups`` (and the loads and unloads between steps); the counters are read for metrics.
"""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

from mstar.models.lora.adapter import LoraAdapter, read_adapter
from mstar.models.lora.linear import LoraLinear
from mstar.models.lora.step import LoraStep, Spans
from mstar.settings.knobs.lora import parse_lora_modules


def check_lora_supported(settings) -> None:
    """The combinations LoRA does not run with yet (docs/lora.rst), refused at start."""
    refused = {"MSTAR_COMPILE": settings.compile,
               "MSTAR_SPECULATIVE_METHOD": settings.speculative_method not in (None, "none")}
    for knob, on in refused.items():
        if on:
            raise ValueError(f"LoRA adapters (MSTAR_LORA_MODULES / "
                             f"MSTAR_ALLOW_RUNTIME_LORA_UPDATING) do not run with {knob} yet")


class LoraSlots:
    def __init__(self, model: nn.Module, max_loras: int, max_rank: int) -> None:
        self.model = model
        self.linears = {n: m for n, m in model.named_modules() if isinstance(m, LoraLinear)}
        first = next(iter(self.linears.values()))
        self.step: LoraStep = first.step
        self.dtype = first.lora_a.dtype
        self.max_rank = max_rank
        self.adapters: dict[str, LoraAdapter] = {}
        self.retiring: set[str] = set()  # unloaded while requests still use them
        self.lock = threading.Lock()  # loads and unloads (any thread) vs the step's slot moves
        self.resident: OrderedDict[str, int] = OrderedDict()  # name -> slot, least recent first
        # a heap, lowest first: a step's slots sit at the front (``step.batched``)
        self.free = list(range(max_loras))
        self.loads = 0  # adapters read (start and run time)
        self.load_no: dict[str, int] = {}  # name -> which load it is (prefix-cache keys use it)
        self.evictions = 0  # adapters moved out of a slot for another

    @classmethod
    def at_start(cls, model: nn.Module, settings) -> LoraSlots:
        slots = cls(model, settings.max_loras, settings.max_lora_rank)
        for name, path in parse_lora_modules(settings.lora_modules).items():
            slots.load(name, Path(path))
        return slots

    def names(self) -> list[str]:
        """The adapters new requests may select."""
        return [name for name in self.adapters if name not in self.retiring]

    def load(self, name: str, path: Path) -> None:
        """Read an adapter (AdapterError names what is wrong). A name in use is refused: its
        requests would change adapter mid-way (unload it first)."""
        if name in self.adapters:
            raise ValueError(f"adapter {name!r} is already loaded")
        adapter = read_adapter(name, path, self.model, self.max_rank)
        with self.lock:
            self.adapters[name] = adapter
            self.loads += 1
            self.load_no[name] = self.loads

    def unload(self, name: str) -> None:
        """New requests may no longer select it; it goes once none uses it (``sweep``)."""
        if name not in self.names():
            raise KeyError(name)
        self.retiring.add(name)

    def sweep(self, in_use: set[str]) -> None:
        """Drop the unloaded adapters no request uses any more (between steps)."""
        for name in self.retiring - in_use:
            with self.lock:
                self.retiring.discard(name)
                self.adapters.pop(name)
                self.load_no.pop(name)
                slot = self.resident.pop(name, None)
                if slot is not None:
                    heapq.heappush(self.free, slot)

    def begin(self, names: list[str | None], query_lens: list[int], device: torch.device) -> None:
        """Before a forward: its rows' adapters (None = the base) and token counts."""
        self.step.set(self.slot_spans(names, query_lens), device, self.dtype)

    def end(self) -> None:
        """After it: any other forward (warm-up, a proposer's) runs the base alone."""
        self.step.clear()

    def slot_spans(self, names: list[str | None], query_lens: list[int]) -> dict[int, Spans]:
        """slot -> the step's token ranges, per adapter of the step's rows (``names``, None =
        the base), each adapter put in a slot first."""
        spans: dict[str, Spans] = {}
        start = 0
        for name, n in zip(names, query_lens, strict=True):
            if name is not None:
                spans.setdefault(name, []).append((start, start + n))
            start += n
        with self.lock:
            return {self._slot(name, spans): ranges for name, ranges in spans.items()}

    def _slot(self, name: str, in_step) -> int:
        if name in self.resident:
            self.resident.move_to_end(name)
            return self.resident[name]
        if not self.free:
            victim = next(n for n in self.resident if n not in in_step)
            heapq.heappush(self.free, self.resident.pop(victim))
            self.evictions += 1
        slot = heapq.heappop(self.free)
        pairs = self.adapters[name].pairs
        for module, linear in self.linears.items():
            pair = pairs.get(module)
            linear.set_slot(slot, None if pair is None else pair.a, None if pair is None else pair.b)
        self.resident[name] = slot
        return slot


def fits_lora_slots(lora: str | None, running_loras: set[str], max_loras: int) -> bool:
    """Whether a request for adapter ``lora`` can join requests running ``running_loras``."""
    return lora is None or lora in running_loras or len(running_loras) < max_loras
