"""Settings sent from the conductor to a worker on another host, and what differs from its own.

The conductor's settings are the ones every process runs with; a worker started elsewhere
loads its own (environment, env files, flags) only to log where they differ.
"""

from __future__ import annotations

import json

from pydantic import SecretStr

from mstar.settings.catalog import KNOBS
from mstar.settings.schema import WorkerSettings

MASK = "********"
WITHHELD = "withheld"  # what another process gets instead of a secret's value
SECRETS = tuple(k.name for k in KNOBS if k.secret)


def withhold_secrets(settings: WorkerSettings) -> WorkerSettings:
    """The settings another process runs with: each secret that is set (the API key, the cluster
    secret) becomes a placeholder. No other process needs them (the transport's keys travel with
    the endpoints), and the fingerprint, which counts secrets only as set or unset, is unchanged."""
    return settings.model_copy(update={name: SecretStr(WITHHELD) for name in SECRETS
                                       if getattr(settings, name) is not None})


def withheld(name: str, value: object) -> object:
    """A knob's value as sent to another process: a placeholder for a secret that is set."""
    return WITHHELD if name in SECRETS and value is not None else value


def settings_to_json(settings: WorkerSettings) -> str:
    """Every value, secrets withheld (the JSON dump masks them)."""
    return json.dumps(settings.model_dump(mode="json"))


def settings_from_json(text: str) -> WorkerSettings:
    return WorkerSettings(**json.loads(text))


def differences(local: WorkerSettings, sent: WorkerSettings) -> dict[str, tuple[str, str]]:
    """{knob: (local value, the conductor's value)} for every knob that differs (secrets: only
    set or unset, masked)."""
    mine, theirs = local.model_dump(mode="json"), sent.model_dump(mode="json")
    out = {}
    for name, value in theirs.items():
        if mine[name] != value:
            out[name] = (_shown(name, mine[name]), _shown(name, value))
    return out


def _shown(name: str, value: object) -> str:
    return MASK if name in SECRETS and value is not None else str(value)
