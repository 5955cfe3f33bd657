"""``mstar config show|validate|docs``: the settings, their sources and docs; nothing loaded."""

from __future__ import annotations

import argparse
import json
import sys

from mstar.settings import SettingsError, SettingsUsageError, load_settings
from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.cli_args import add_settings_arguments, settings_from_args
from mstar.settings.docs import DOCS_PATH, bounds_text, check, render
from mstar.settings.sources import LoadedSettings, display_value


def add_parser(subparsers) -> None:
    config = subparsers.add_parser("config", help="show, validate and document the settings")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")

    show = actions.add_parser("show", help="every knob with its value, source, default and meaning")
    add_settings_arguments(show, knob_flags=False)
    show.add_argument("--json", action="store_true", help="print a JSON list of objects")
    show.add_argument("--changed", action="store_true",
                      help="only values that differ from the default")
    show.set_defaults(func=run_show)

    validate = actions.add_parser("validate", help="check a configuration without loading anything")
    add_settings_arguments(validate, knob_flags=False)
    validate.set_defaults(func=run_validate)

    docs = actions.add_parser("docs", help=f"write {DOCS_PATH.name} from the schema")
    docs.add_argument("--check", action="store_true", help="exit 1 and show the diff when stale")
    docs.set_defaults(func=run_docs)


def _record(knob: Knob, loaded: LoadedSettings) -> dict:
    return {
        "name": knob.env,
        "value": display_value(knob, getattr(loaded.settings, knob.name)),
        "default": display_value(knob, knob.default),
        "source": str(loaded.sources[knob.name]),
        "unit": knob.unit,
        "min": knob.minimum,
        "max": knob.maximum,
        "min_exclusive": knob.min_exclusive,
        "choices": list(knob.choices) if knob.choices else None,
        "category": knob.category,
        "description": knob.description,
    }


def _text(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def run_show(args: argparse.Namespace) -> int:
    from mstar.logging_setup import start_logging

    loaded = settings_from_args(args)
    start_logging(loaded)  # the warnings go to stderr, the table to stdout
    changed = {name for name, _, _ in loaded.changed()}
    shown = [k for k in KNOBS if not args.changed or k.env in changed]
    if args.json:
        print(json.dumps([_record(k, loaded) for k in shown], indent=2))
        return 0
    category = None
    for knob in shown:
        rec = _record(knob, loaded)
        if rec["category"] != category:
            category = rec["category"]
            print(f"\n[{category}]")
        unit = f" {rec['unit']}" if rec["unit"] and rec["value"] is not None else ""
        limits = bounds_text(knob)
        print(f"{rec['name']} = {_text(rec['value'])}{unit}")
        print(f"    source: {rec['source']}; default: {_text(rec['default'])}"
              + (f"; allowed: {limits}" if limits else ""))
        print(f"    {rec['description']}")
    return 0


def run_validate(args: argparse.Namespace) -> int:
    try:
        loaded = load_settings(env_files=args.env_file, strict=True if args.strict else None)
    except SettingsUsageError as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        return 2
    except SettingsError as exc:
        print(f"error: {exc}")
        return 1
    for problem in loaded.problems:
        print(f"warning: {problem.message()}")
    for notice in loaded.notices:
        print(f"notice: {notice}")
    count = len(loaded.problems)
    print(f"configuration is usable ({count} warning{'s' if count != 1 else ''})")
    return 0


def run_docs(args: argparse.Namespace) -> int:
    if args.check:
        diff = check()
        if diff:
            sys.stdout.write(diff)
            print(f"\n{DOCS_PATH} is stale; run 'mstar config docs' to regenerate it.",
                  file=sys.stderr)
            return 1
        print(f"{DOCS_PATH} is up to date.")
        return 0
    DOCS_PATH.parent.mkdir(parents=True, exist_ok=True)
    DOCS_PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {DOCS_PATH}")
    return 0
