"""structlog set-up shared by every mstar process: events go to stderr, console or JSON."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from mstar.settings.sources import LoadedSettings


def _renderer(fmt: str, debug: bool) -> list:
    """The last processors: tracebacks with local variables only at debug level."""
    if fmt == "json":
        transformer = structlog.tracebacks.ExceptionDictTransformer(show_locals=debug)
        return [structlog.processors.ExceptionRenderer(transformer),
                structlog.processors.JSONRenderer()]
    formatter = structlog.dev.default_exception_formatter if debug else structlog.dev.plain_traceback
    return [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), sort_keys=False,
                                          exception_formatter=formatter)]


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Route structlog and the standard library's logging to stderr at ``level``."""
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=False),
            *_renderer(fmt, debug=numeric <= logging.DEBUG),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # Resolve sys.stderr per logger, not once: it may be replaced (test capture, daemonizing).
        logger_factory=lambda *args: structlog.PrintLogger(sys.stderr),
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=numeric, stream=sys.stderr, force=True,
                        format="%(asctime)s [%(levelname)s] %(name)s: %(message)s")


def start_logging(loaded: LoadedSettings) -> None:
    """What every entry point does once its settings are built: configure logging, then report."""
    configure_logging(loaded.settings.log_level, loaded.settings.log_format)
    log_settings_report(loaded)


def log_settings_report(loaded: LoadedSettings) -> None:
    """Log every configuration problem, every notice, then the values that differ from defaults."""
    log_problems(loaded.problems)
    log = structlog.get_logger("mstar.settings")
    for notice in loaded.notices:
        log.warning("setting_notice", message=notice)
    changed = {name: f"{value} ({source})" for name, value, source in loaded.changed()}
    if changed:
        log.info("settings_changed", **changed)


def log_problems(problems: tuple) -> None:
    """One warning per configuration problem (unknown names, rejected or clamped values)."""
    log = structlog.get_logger("mstar.settings")
    for problem in problems:
        if problem.value is None:
            log.warning("setting_problem", variable=problem.variable, reason=problem.reason,
                        source=problem.location)
        else:
            log.warning("setting_rejected", variable=problem.variable, value=problem.value,
                        used=problem.used, reason=problem.reason, source=problem.location)
