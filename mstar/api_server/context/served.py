"""The served model as the routes see it: its names, its length and what a request may carry."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mstar.api_server.context.adapters import AdapterNames
from mstar.api_server.context.running import RunningSettings

# The content-part type (OpenAI's name) that carries each modality a walk graph may take.
PART_TYPES = {"text": "text", "image": "image_url", "audio": "input_audio"}


@dataclass(frozen=True)
class ServedModel:
    name: str  # the name the workers report
    max_model_len: int
    running: RunningSettings  # the aliases (MSTAR_SERVED_MODEL_NAMES) are read per request
    # What a request may carry, from the model's walk graph
    # (``models.loading.registry.accepted_modalities``): "text", "image", "audio".
    modalities: tuple[str, ...] = ("text",)
    # /v1/models' ``created``: when this server started serving it (Unix seconds), the same in
    # every listing
    created: int = field(default_factory=lambda: int(time.time()))
    # The label of each classifier logit (rerank, score, classify; ``context.heads``): () when
    # the model has no classifier head.
    labels: tuple[str, ...] = ()
    generates: bool = True  # False: a sequence classifier (no LM head) only classifies
    # What the model's walk graph emits to the client (``WalkGraph.output_modalities``):
    # "text", and "audio" where a codec node emits it (/v1/audio/speech)
    outputs: tuple[str, ...] = ("text",)
    # The voices of a model that speaks (chat's audio.voice; Qwen3-Omni: the keys of
    # talker_config.speaker_id, ``media.model.model_voices``); () for one that does not
    voices: tuple[str, ...] = ()
    # Its speech is a chat reply (``models.loading.registry.speaks_replies``: Qwen3-Omni, whose
    # /v1/audio/speech ``input`` is a user turn through the chat template); False for a model
    # that speaks a turn of its own (CSM: ``utterance.csm_turn``) or does not speak
    speaks_replies: bool = False
    # LoRA adapters: more model names, each selecting its adapter (docs/lora.rst)
    adapters: AdapterNames = field(default_factory=lambda: AdapterNames(None))

    def served_names(self) -> list[str]:
        """The names /v1/models lists: the served name, then MSTAR_SERVED_MODEL_NAMES."""
        settings = self.running.settings
        aliases = (settings.served_model_names or "").split(",")
        return list(dict.fromkeys([self.name, *(a.strip() for a in aliases if a.strip())]))

    def serves(self, model: str | None) -> bool:
        """Whether a request's ``model`` names this model (absent: yes; MSTAR_MODEL works too)."""
        return (model is None or model in self.served_names() or model == self.running.settings.model
                or model in self.adapters)

    def adapter_of(self, model: str | None) -> str | None:
        """The LoRA adapter a request's ``model`` selects; None: the base model."""
        return model if model in self.adapters else None

    def takes(self, modality: str) -> bool:
        return modality in self.modalities

    @property
    def takes_images(self) -> bool:
        return self.takes("image")

    @property
    def part_types(self) -> tuple[str, ...]:
        """The content-part types a request may carry (``text``, ``image_url``,
        ``input_audio``), one per modality of the graph."""
        return tuple(PART_TYPES[m] for m in self.modalities if m in PART_TYPES)
