"""The settings one API server runs with: their one owner."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mstar.settings import LoadedSettings, WorkerSettings
    from mstar.settings.keys_file import KeyTable


class RunningSettings:
    """The running settings, their sources and the restart-only changes the last reload found.

    Routes and helpers read ``settings`` when they need a knob (per request: a reload may change
    it); only ``reload.apply_reload`` replaces them (``replace``).
    """

    def __init__(self, settings: WorkerSettings, loaded: LoadedSettings | None = None) -> None:
        self._settings = settings
        self._fingerprint = settings.fingerprint()  # a hash of every value: once per settings
        self._loaded = loaded  # None: an app built without sources (tests)
        self._pending_restart: dict[str, dict] = {}

    @property
    def settings(self) -> WorkerSettings:
        return self._settings

    @property
    def fingerprint(self) -> str:
        """``settings.fingerprint()``, computed when they were set (every response carries it)."""
        return self._fingerprint

    @property
    def loaded(self) -> LoadedSettings | None:
        return self._loaded

    @property
    def keys(self) -> KeyTable | None:
        """MSTAR_API_KEYS_FILE's keys in force (replaced with the settings on a reload)."""
        return None if self._loaded is None else self._loaded.keys

    @property
    def pending_restart(self) -> dict[str, dict]:
        """Restart-only knobs the last reload found changed: env -> {"value", "source"}."""
        return dict(self._pending_restart)

    def replace(self, loaded: LoadedSettings, pending_restart: dict[str, dict]) -> None:
        self._loaded = loaded
        self._settings = loaded.settings
        self._fingerprint = loaded.settings.fingerprint()
        self._pending_restart = dict(pending_restart)
