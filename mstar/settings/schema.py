"""The one place every ``MSTAR_*`` knob is declared.

Each field is a knob: its environment name is ``MSTAR_`` + the upper-cased field name. Type, default,
bounds (``ge``/``gt``/``le``), unit, category and description live on the field, and everything else
(parsing, the CLI, ``mstar config show``, the generated docs) is derived from them. To add a knob, add a
field to the right group in ``mstar/settings/knobs/`` and run ``mstar config docs``.

``WorkerSettings`` never reads the environment itself: ``mstar.settings.sources.load_settings`` does that
once, applying the lenient rules, and passes the parsed values in. Direct construction
(``WorkerSettings(kv_block_size=4)``) is for tests and embedding.
"""

from __future__ import annotations

import hashlib

from pydantic_settings import BaseSettings, SettingsConfigDict

from mstar.settings.knobs.admission import AdmissionKnobs
from mstar.settings.knobs.config import ConfigKnobs
from mstar.settings.knobs.engine import BUILTIN_MODEL, EngineKnobs
from mstar.settings.knobs.field import MAX_COUNT, MAX_WAIT_MS, MAX_WAIT_S, knob
from mstar.settings.knobs.lora import LoraKnobs
from mstar.settings.knobs.media import MediaKnobs
from mstar.settings.knobs.models import ModelsKnobs
from mstar.settings.knobs.server import RequestLimitKnobs, ServerKnobs
from mstar.settings.knobs.speculative import SpeculativeKnobs
from mstar.settings.knobs.transport import TransportKnobs
from mstar.settings.knobs.worker_loop import OVERLAP_CAP_ON_CUDA, SERIAL_ON_CPU, WorkerLoopKnobs

__all__ = ["BUILTIN_MODEL", "ENV_PREFIX", "MAX_COUNT", "MAX_WAIT_MS", "MAX_WAIT_S", "OVERLAP_CAP_ON_CUDA",
           "SERIAL_ON_CPU", "WorkerSettings", "env_name", "knob"]

ENV_PREFIX = "MSTAR_"


class WorkerSettings(BaseSettings, WorkerLoopKnobs, ServerKnobs, RequestLimitKnobs, EngineKnobs,
                     SpeculativeKnobs, TransportKnobs, MediaKnobs, AdmissionKnobs, LoraKnobs,
                     ModelsKnobs, ConfigKnobs):
    """Every knob, frozen. Built once per process tree and passed down explicitly."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    # Not a knob (no group declares it, so it has no variable): the content hash of
    # MSTAR_API_KEYS_FILE, set by ``load_settings`` when it reads the file, so that the fingerprint
    # covers the keys in force. It travels with the settings (a reload sends it to the workers).
    api_keys_digest: str | None = None

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        # Only explicit values: the environment is read once, by load_settings, with provenance.
        return (init_settings,)

    def fingerprint(self) -> str:
        """A short hash of every effective value, to check that processes agree.

        Secrets count only as set or unset (the JSON dump masks them): the fingerprint is sent to
        every client, and a hash of a key would let anyone test guesses of it offline.
        """
        values = self.model_dump(mode="json")
        return hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16]


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()
