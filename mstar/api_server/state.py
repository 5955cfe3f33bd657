"""Everything the routes of one running API server share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mstar.api_server.media.loader import ImageLoader
from mstar.api_server.metrics import Metrics
from mstar.api_server.validation.unknown_fields import UnknownFieldPolicy
from mstar.output.token_bytes import TokenBytes

if TYPE_CHECKING:
    from mstar.api_server.generation.engine_client import EngineClient
    from mstar.settings import LoadedSettings, WorkerSettings


@dataclass
class ServerState:
    settings: WorkerSettings
    tokenizer: Any
    client: EngineClient
    model_name: str
    max_model_len: int
    metrics: Metrics
    in_flight: int = 0
    draining: bool = False
    # The running settings with their sources (``settings`` is ``loaded.settings``) and the
    # restart-only changes the last reload found; both change only in ``reload.apply_reload``.
    loaded: LoadedSettings | None = None
    pending_restart: dict[str, dict] = field(default_factory=dict)
    # What a request may carry (``models.registry.accepted_modalities``): "text", "image".
    modalities: tuple[str, ...] = ("text",)
    processor: Any = None  # a vision model's transformers processor (its PIL image processor)
    unknown_fields: UnknownFieldPolicy = field(init=False)
    media: ImageLoader = field(init=False)  # image fetching and decoding, and their bounds
    token_bytes: TokenBytes | None = field(init=False)  # each token's exact bytes (logprobs)

    def __post_init__(self) -> None:
        self.unknown_fields = UnknownFieldPolicy(self.settings.unknown_request_fields)
        self.media = ImageLoader(self.settings)
        self.token_bytes = None if self.tokenizer is None else TokenBytes(self.tokenizer)

    def unavailable_reason(self) -> str | None:
        """Why new generation requests are refused right now, if they are."""
        if self.client.failure is not None:
            return f"server is stopping after a fault: {self.client.failure}"
        if self.draining:
            return "server is shutting down"
        return None

    def served_names(self) -> list[str]:
        """The names /v1/models lists: the served name, then MSTAR_SERVED_MODEL_NAMES."""
        aliases = (self.settings.served_model_names or "").split(",")
        return list(dict.fromkeys([self.model_name, *(a.strip() for a in aliases if a.strip())]))

    def serves(self, model: str | None) -> bool:
        """Whether a request's ``model`` names this model (absent: yes; MSTAR_MODEL works too)."""
        return model is None or model in self.served_names() or model == self.settings.model
