"""Which knobs a running server applies on SIGHUP; every other knob needs a restart.

The one place reloadability is declared (``catalog.Knob.reloadable`` reads it). A knob belongs here
only when every process that uses it re-derives it from new settings: the API server reads its
knobs from ``RunningSettings.settings`` per request, the step loop re-derives its knobs in
``StepLoop.apply`` between steps, and every process reconfigures logging.
"""

from __future__ import annotations

RELOADABLE = frozenset({
    # every process
    "log_level",
    "log_format",
    # the API server
    "api_key",
    "api_keys_file",  # re-read on every SIGHUP, changed or not (``load_settings``)
    "max_concurrent_requests",
    "request_timeout_s",
    "stream_interval",
    # the worker loop (StepLoop.apply): live A/B of the overlapped loop
    "max_consecutive_spec_steps",
    "spec_peek_for_fairness",
    "spec_yield_hold_ms",
    "launch_wait_ms",
    "engine_step_sync",
    "phase_timing",
})
