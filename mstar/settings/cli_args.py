"""Command-line access to the settings: --env-file, --strict and one flag per knob."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from mstar.settings.catalog import KNOBS
from mstar.settings.env_file import SettingsUsageError
from mstar.settings.sources import LoadedSettings, SettingsError, load_settings

_DEST_PREFIX = "knob_"


def add_settings_arguments(parser: argparse.ArgumentParser, knob_flags: bool = True) -> None:
    """Add --env-file, --strict and, with ``knob_flags``, ``--<knob-name>`` for every knob."""
    parser.add_argument("--env-file", action="append", default=[], metavar="FILE",
                        help="read MSTAR_* settings from FILE (repeatable; later files win)")
    parser.add_argument("--strict", action="store_true",
                        help="treat every configuration problem as an error "
                             "(same as MSTAR_CONFIG_STRICTNESS=strict)")
    if not knob_flags:
        return
    group = parser.add_argument_group("settings (each overrides its MSTAR_* variable)")
    for knob in KNOBS:
        group.add_argument("--" + knob.name.replace("_", "-"), dest=_DEST_PREFIX + knob.name,
                           metavar="VALUE", default=None,
                           help=f"{knob.env}: {knob.description.replace('%', '%%')}")


def cli_values(args: argparse.Namespace) -> dict[str, str]:
    return {key[len(_DEST_PREFIX):]: value for key, value in vars(args).items()
            if key.startswith(_DEST_PREFIX) and value is not None}


def settings_from_args(args: argparse.Namespace,
                       overrides: Mapping[str, Any] | None = None) -> LoadedSettings:
    """Build the settings for a command; on failure print every problem and exit (1 strict, 2 usage)."""
    try:
        return load_settings(overrides={k: v for k, v in (overrides or {}).items() if v is not None},
                             env_files=args.env_file, strict=True if args.strict else None,
                             cli=cli_values(args))
    except SettingsUsageError as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except SettingsError as exc:
        print(f"mstar: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
