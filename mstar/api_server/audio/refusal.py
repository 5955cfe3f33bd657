"""The one rule for an audio route asked of a model that cannot serve it: a 400 naming ``model``
(``/v1/audio/transcriptions`` of a model that does not transcribe, ``/v1/audio/speech`` of one
whose graph emits no audio)."""

from __future__ import annotations

from mstar.api_server.http.errors import APIError


def model_refusal(name: str, lacks: str) -> APIError:
    """``lacks``: what the model does not do, and why ("transcribe audio (...)")."""
    return APIError(400, f"`model`: {name} does not {lacks}", "model")
