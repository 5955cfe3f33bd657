"""A child process's side of a settings reload (SIGHUP in the API server, ``ReloadSettings``)."""

from __future__ import annotations

import structlog

from mstar.ipc.messages import ReloadSettings
from mstar.logging_setup import configure_logging
from mstar.settings import WorkerSettings
from mstar.settings.reload import with_values

log = structlog.get_logger(__name__)


def apply_reloaded(settings: WorkerSettings, msg: ReloadSettings, process: str) -> WorkerSettings:
    """New frozen settings with the reloadable values, and logging reconfigured from them. The
    fingerprint must be the API server's; a mismatch is logged (the process keeps serving)."""
    new = with_values(settings, msg.values)
    configure_logging(new.log_level, new.log_format)
    fingerprint = new.fingerprint()
    if fingerprint != msg.fingerprint:
        log.error("settings_fingerprint_mismatch", process=process, fingerprint=fingerprint,
                  expected=msg.fingerprint)
    log.info("settings_applied", process=process, fingerprint=fingerprint)
    return new
