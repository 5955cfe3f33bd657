"""How the settings themselves behave."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from mstar.settings.knobs.field import _config


class ConfigKnobs(BaseModel):
    config_strictness: Literal["warn", "strict"] = _config(
        "warn", "warn: bad values warn and fall back. strict: every problem is an error and "
        "nothing starts.")
