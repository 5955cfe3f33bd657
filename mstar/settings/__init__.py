"""mstar's settings layer: every MSTAR_* knob, parsed once, validated, frozen, passed down.

Importing this package must stay cheap: it never imports torch or transformers.
"""

from mstar.settings.env_file import SettingsUsageError
from mstar.settings.schema import BUILTIN_MODEL, WorkerSettings
from mstar.settings.sources import LoadedSettings, Problem, SettingsError, Source, load_settings

__all__ = [
    "BUILTIN_MODEL",
    "LoadedSettings",
    "Problem",
    "SettingsError",
    "SettingsUsageError",
    "Source",
    "WorkerSettings",
    "load_settings",
]
