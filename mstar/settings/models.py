"""Each model's settings when MSTAR_MODELS serves several: the main settings' sources again, with
the model's own env file (MSTAR_MODELS_ENV_DIR/<name>.env, when there is one) above the main env
files and the environment (below command-line flags), and the model's source as MSTAR_MODEL.

Built by the same ``load_settings`` as the main settings, so a model's env file follows the same
rules: strict mode, and problems naming the file and line. Built once at start, before anything
heavy, by ``mstar serve`` and ``mstar config show``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mstar.settings.catalog import BY_ENV
from mstar.settings.env_file import SettingsUsageError, read_env_file
from mstar.settings.knobs.models import parse_models
from mstar.settings.records import settings_records
from mstar.settings.sources import FOREIGN_ENV, LoadedSettings, SettingsError, load_settings

ENV_SUFFIX = ".env"


def model_env_file(env_dir: Path | None, name: str) -> Path | None:
    """The model's own env file, when MSTAR_MODELS_ENV_DIR holds one."""
    if env_dir is None:
        return None
    path = Path(env_dir) / f"{name.replace('/', '--')}{ENV_SUFFIX}"
    return path if path.exists() else None


def model_settings(loaded: LoadedSettings) -> dict[str, LoadedSettings]:
    """{name: that model's settings}, in MSTAR_MODELS' order; {} when MSTAR_MODELS is unset.
    Raises ValueError for a bad MSTAR_MODELS, SettingsError for a bad model env file."""
    inputs, settings = loaded.inputs, loaded.settings
    built = {}
    for name, source in parse_models(settings.models).items():
        own = model_env_file(settings.models_env_dir, name)
        built[name] = load_settings(
            overrides={**inputs.overrides, "model": source},
            env_files=(*inputs.env_files, *([own] if own is not None else [])),
            strict=inputs.strict,  # None: each model's MSTAR_CONFIG_STRICTNESS
            environ=_beneath(inputs.environ, own), cli=inputs.cli)
    return built


def _beneath(environ: Mapping[str, str], own: Path | None) -> dict[str, str]:
    """The environment without the variables the model's env file sets, so that the file wins
    over the environment as well as over the main env files (command-line flags still win)."""
    if own is None:
        return dict(environ)
    entries, _ = read_env_file(own)  # its problems are reported when load_settings reads it
    names = {BY_ENV[e.key].name for e in entries if e.key in BY_ENV}
    return {key: value for key, value in environ.items()
            if (BY_ENV[key].name if key in BY_ENV else FOREIGN_ENV.get(key)) not in names}


def models_or_exit(loaded: LoadedSettings) -> dict[str, LoadedSettings]:
    """``model_settings`` for a command: on failure print the problem and exit (1: a model's
    settings have problems in strict mode; 2: a bad MSTAR_MODELS or a missing file)."""
    try:
        return model_settings(loaded)
    except (ValueError, SettingsUsageError) as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except SettingsError as exc:
        print(f"mstar: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def models_view(per_model: dict[str, LoadedSettings]) -> dict[str, dict[str, Any]]:
    """Each model's effective settings and fingerprint, as ``mstar config show --json`` prints
    and ``GET /v1/config`` returns them under ``models``."""
    return {name: {"model": loaded.settings.model, "fingerprint": loaded.settings.fingerprint(),
                   "settings": settings_records(loaded)}
            for name, loaded in per_model.items()}
