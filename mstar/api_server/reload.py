"""SIGHUP in the API server: re-read the env files given at start, apply the reloadable changes
here and (through the conductor) in every worker, and log one structured diff. A SIGHUP during
start-up is deferred until the server is ready (``DeferredReload``).

The same lenient and strict rules as at start apply. A reload that fails them (strict mode with any
problem, a security problem, an env file that cannot be read) is rejected whole: the old settings
stay everywhere. Restart-only changes are not applied; each gets one "needs restart" warning.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from mstar.api_server.context.running import RunningSettings
from mstar.engine.rendezvous import check_deterministic_loop
from mstar.ipc import messages as m
from mstar.logging_setup import configure_logging, log_problems
from mstar.settings import SettingsError, SettingsUsageError
from mstar.settings.reload import ReloadPlan, is_strict, plan_reload, reloadable_values
from mstar.settings.sources import reload_settings

log = structlog.get_logger("mstar.settings")


class DeferredReload:
    """The SIGHUP handler while the server starts: the reload is logged as deferred and applied
    once the server is ready (``serve`` checks ``pending``)."""

    def __init__(self) -> None:
        self.pending = False

    def __call__(self, signum: int, frame: object) -> None:
        self.pending = True
        log.info("settings_reload_deferred", reason="the server is starting: the reload is "
                 "applied once it is ready")


def reload_server_settings(settings: RunningSettings,
                           send_control: Callable[[m.Message], None]) -> None:
    """``send_control``: the engine client's, to the conductor (which relays to the workers)."""
    running = settings.loaded
    if running is None:
        log.warning("settings_reload_ignored", reason="the server has no settings sources")
        return
    files = [str(p) for p in running.inputs.env_files]
    try:
        fresh = reload_settings(running.inputs, strict=is_strict(running))
    except SettingsUsageError as exc:
        log.error("settings_reload_rejected", reason=str(exc), env_files=files,
                  fingerprint=settings.settings.fingerprint())
        return
    except SettingsError as exc:
        log.error("settings_reload_rejected", problems=[p.message() for p in exc.problems],
                  env_files=files, fingerprint=settings.settings.fingerprint())
        return
    log_problems(fresh.problems)
    plan = plan_reload(running, fresh)
    try:  # the start-up rules that span knobs hold for the running settings too
        check_deterministic_loop(plan.running.settings)
    except ValueError as exc:
        log.error("settings_reload_rejected", reason=str(exc), env_files=files,
                  fingerprint=settings.settings.fingerprint())
        return
    for change in plan.needs_restart:
        log.warning("setting_needs_restart", variable=change.env, running=change.old,
                    configured=change.new, source=change.new_source,
                    message="needs restart")
    previous = settings.settings.fingerprint()
    apply_reload(settings, send_control, plan)
    log.info("settings_reloaded", env_files=files, fingerprint=settings.settings.fingerprint(),
             previous_fingerprint=previous,
             changed={c.env: c.as_dict() for c in plan.applied},
             needs_restart=[c.env for c in plan.needs_restart])


def apply_reload(running: RunningSettings, send_control: Callable[[m.Message], None],
                 plan: ReloadPlan) -> None:
    """The one place the API server's settings change; the workers get them by message."""
    running.replace(plan.running, {c.env: {"value": c.new, "source": c.new_source}
                                   for c in plan.needs_restart})
    settings = running.settings
    configure_logging(settings.log_level, settings.log_format)
    if plan.applied:
        send_control(m.ReloadSettings(reloadable_values(settings), settings.fingerprint()))
