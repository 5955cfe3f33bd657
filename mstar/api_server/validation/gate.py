"""What a request passes before any work: the served model, the list bounds (``http.bounds``: the
same function for a limit on every route), the endpoint's rejected fields, the rules of its kind
and the common ones; the headers it gets (unknown fields)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mstar.api_server.context.caller import current_caller
from mstar.api_server.context.running import RunningSettings
from mstar.api_server.context.served import ServedModel
from mstar.api_server.http.bounds import Counted, check_counts
from mstar.api_server.http.errors import APIError
from mstar.api_server.validation.field_table import Endpoint, rows_for
from mstar.api_server.validation.request_rules import (
    ChatRequest,
    Rule,
    check_content_parts,
    check_rejected_fields,
    check_request,
)
from mstar.api_server.validation.unknown_fields import (
    UnknownFieldPolicy,
    unknown_fields,
    unknown_names,
)


class Bounded(Protocol):
    """A request model (``openai.protocol.StrictModel``): its model name, and what its lists
    hold (``http.bounds``)."""

    model: str | None

    def counted(self) -> list[Counted]: ...


class RequestGate:
    def __init__(self, model: ServedModel, running: RunningSettings, vocab_size: int) -> None:
        self._model = model
        self._running = running
        self._vocab_size = vocab_size
        # As the server started: MSTAR_UNKNOWN_REQUEST_FIELDS is not reloaded here.
        self._unknown = UnknownFieldPolicy(running.settings.unknown_request_fields)

    def check_model(self, model: str | None) -> None:
        if not self._model.serves(model):
            served = ", ".join(self._model.served_names())
            raise APIError(404, f"The model `{model}` does not exist; this server serves: "
                           f"{served}", "model", code="model_not_found",
                           kind="invalid_request_error")
        refusal = current_caller().model_refusal(model or self._model.name)  # the key's models
        if refusal is not None:
            raise APIError(403, refusal, "model", code="model_not_allowed",
                           kind="permission_error")

    def content_parts(self, req: ChatRequest) -> None:
        """A chat request's content parts, images and audio as far as the served model takes
        them."""
        settings = self._running.settings
        check_content_parts(req, self._model.takes_images, settings.max_images_per_request,
                            "audio" in self._model.modalities,
                            settings.max_audio_parts_per_request)

    def admit(self, req: Any, endpoint: Endpoint | None,
              rules: tuple[Rule, ...] = ()) -> dict[str, str]:
        """Check a generation request before any work (``rules``: those of its kind); the
        response headers it gets (unknown fields)."""
        self.check_model(req.model)
        check_counts(req.counted(), self._running.settings)
        check_request(req, endpoint, self._vocab_size, rules)
        return self._unknown.headers(unknown_fields(req))

    def admit_fields(self, req: Any, endpoint: Endpoint | None = None,
                     check: Callable[[Any], None] | None = None) -> dict[str, str]:
        """The model, the list bounds, the endpoint's rejected fields and ``check`` (a route's own
        rules), for the routes that do not generate through ``admit``; the response headers
        (unknown fields)."""
        self.check_model(req.model)
        check_counts(req.counted(), self._running.settings)
        if endpoint is not None:
            check_rejected_fields(req, endpoint)
        if check is not None:
            check(req)
        return self._unknown.headers(unknown_fields(req))

    def form_headers(self, sent: list[str], endpoint: Endpoint) -> dict[str, str]:
        """The response headers for a multipart form (the audio routes) whose ``sent`` field
        names no row of ``endpoint`` knows, under MSTAR_UNKNOWN_REQUEST_FIELDS (or a 400)."""
        known = [row.name for row in rows_for(endpoint)]
        return self._unknown.headers(unknown_names(sent, known))
