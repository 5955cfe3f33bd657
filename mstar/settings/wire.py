"""Settings sent from the conductor to a worker on another host, and what differs from its own.

The conductor's settings are the ones every process runs with; a worker started elsewhere
loads its own (environment, env files, flags) only to log where they differ.
"""

from __future__ import annotations

import json

from mstar.settings.schema import WorkerSettings

MASK = "********"


def settings_to_json(settings: WorkerSettings) -> str:
    """Every value, the API key included (the transport carries it like the prompts: keep the
    tcp transport on a private network)."""
    values = settings.model_dump(mode="json")
    if settings.api_key is not None:
        values["api_key"] = settings.api_key.get_secret_value()
    return json.dumps(values)


def settings_from_json(text: str) -> WorkerSettings:
    return WorkerSettings(**json.loads(text))


def differences(local: WorkerSettings, sent: WorkerSettings) -> dict[str, tuple[str, str]]:
    """{knob: (local value, the conductor's value)} for every knob that differs (secrets masked)."""
    mine, theirs = local.model_dump(mode="json"), sent.model_dump(mode="json")
    out = {}
    for name, value in theirs.items():
        if mine[name] != value or (name == "api_key" and local.api_key != sent.api_key):
            secret = name == "api_key"
            out[name] = (MASK if secret else str(mine[name]), MASK if secret else str(value))
    return out
