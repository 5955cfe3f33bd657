"""GET /v1/config: the settings this server runs with, as ``mstar config show --json`` records.

Each record also says whether the knob is reloadable and, after a SIGHUP found a restart-only
change, the value waiting for a restart. Secrets are masked; the route needs the API key like every
other route but /health.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from mstar.api_server.context.running import RunningSettings
from mstar.settings.catalog import KNOBS
from mstar.settings.records import settings_records
from mstar.settings.sources import LoadedSettings, Source

router = APIRouter()


def running_settings(running: RunningSettings) -> LoadedSettings:
    """The running settings with their sources (an app built without them: source unknown)."""
    if running.loaded is not None:
        return running.loaded
    return LoadedSettings(running.settings, {k.name: Source("unknown") for k in KNOBS}, ())


@router.get("/v1/config")
async def config(request: Request) -> dict:
    running: RunningSettings = request.app.state.running
    return {"object": "config", "fingerprint": running.fingerprint,
            "settings": settings_records(running_settings(running), running.pending_restart)}
