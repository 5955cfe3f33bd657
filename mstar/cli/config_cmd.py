"""``mstar config show|validate|diff|schema|template|helm|docs``: the settings, their sources and
docs; nothing loaded. ``--url`` reads a running server (see ``config_remote``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from mstar.cli import config_remote
from mstar.settings import SettingsError, SettingsUsageError, load_settings
from mstar.settings.catalog import BY_ENV
from mstar.settings.checks.executor import executor_problems
from mstar.settings.cli_args import add_settings_arguments, settings_from_args
from mstar.settings.models import models_or_exit, models_view
from mstar.settings.records import settings_records
from mstar.settings.render.docs import bounds_text
from mstar.settings.render.generated import GENERATED, stale_files, write_generated
from mstar.settings.render.helm import render_values, render_values_schema
from mstar.settings.render.json_schema import render_schema
from mstar.settings.render.template import render_template


def add_parser(subparsers) -> None:
    config = subparsers.add_parser("config", help="show, validate, compare and document the "
                                   "settings")
    actions = config.add_subparsers(dest="action", required=True, metavar="ACTION")

    show = actions.add_parser("show", help="every knob with its value, source, default and meaning")
    add_settings_arguments(show, knob_flags=False)
    show.add_argument("--json", action="store_true", help="print a JSON list of objects")
    show.add_argument("--changed", action="store_true",
                      help="only values that differ from the default")
    config_remote.add_url_arguments(show, "a running server's settings (GET /v1/config)")
    show.set_defaults(func=run_show)

    validate = actions.add_parser("validate", help="check a configuration without loading anything")
    add_settings_arguments(validate, knob_flags=False)
    validate.add_argument("--model", metavar="PATH|builtin|ORG/NAME[@REV]",
                          help="also check the settings against this model's config.json")
    validate.set_defaults(func=run_validate)

    config_remote.add_diff_parser(actions)

    schema = actions.add_parser("schema", help="print a JSON Schema of every knob")
    schema.set_defaults(func=lambda args: _print(render_schema()))
    template = actions.add_parser("template", help="print a commented .env.example")
    template.set_defaults(func=lambda args: _print(render_template()))
    helm = actions.add_parser("helm", help="print the Helm chart's values.schema.json (or, with "
                              "--values, its values.yaml), generated from the settings schema")
    helm.add_argument("--values", action="store_true", help="print values.yaml instead")
    helm.set_defaults(func=lambda args: _print(render_values() if args.values
                                               else render_values_schema()))

    docs = actions.add_parser("docs", help="write the files generated from the schema (docs/, "
                              "deploy/helm/) and the metric declarations (deploy/grafana/)")
    docs.add_argument("--check", action="store_true", help="exit 1 and show the diff when stale")
    docs.set_defaults(func=run_docs)


def _print(text: str) -> int:
    sys.stdout.write(text)
    return 0


def _text(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def print_table(records: list[dict]) -> None:
    category = None
    for rec in records:
        if rec["category"] != category:
            category = rec["category"]
            print(f"\n[{category}]")
        unit = f" {rec['unit']}" if rec["unit"] and rec["value"] is not None else ""
        knob = BY_ENV.get(rec["name"])
        limits = bounds_text(knob) if knob is not None else ""
        print(f"{rec['name']} = {_text(rec['value'])}{unit}")
        print(f"    source: {rec['source']}; default: {_text(rec['default'])}"
              + (f"; allowed: {limits}" if limits else "")
              + ("; reloadable" if rec.get("reloadable") else "")
              + (f"; NO EFFECT since {rec['no_effect']}" if rec.get("no_effect") else ""))
        if rec.get("pending_restart"):
            waiting = rec["pending_restart"]
            print(f"    needs restart: {_text(waiting['value'])} from {waiting['source']}")
        print(f"    {rec['description']}")


def run_show(args: argparse.Namespace) -> int:
    models: dict = {}  # MSTAR_MODELS' models (a running server's: in its /v1/config)
    if args.url:
        records = config_remote.remote_records(args)
        if records is None:
            return 2
    else:
        from mstar.logging_setup import start_logging

        loaded = settings_from_args(args)
        start_logging(loaded)  # the warnings go to stderr, the table to stdout
        records = settings_records(loaded)
        models = models_view(models_or_exit(loaded))
    full = records
    if args.changed:
        records = [r for r in records if r["value"] != r["default"]]
    if args.json:  # with MSTAR_MODELS: an object, as GET /v1/config's
        print(json.dumps({"settings": records, "models": models} if models else records,
                         indent=2))
        return 0
    print_table(records)
    for name, view in models.items():
        print_model(name, view, full)
    return 0


def print_model(name: str, view: dict, main: list[dict]) -> None:
    """One model of MSTAR_MODELS: its fingerprint, then each knob whose value differs from the
    main settings' (its source, and MSTAR_MODEL); every other knob is as above."""
    print(f"\n== model {name}: {view['model']} (fingerprint {view['fingerprint']}) ==")
    shown = {rec["name"]: rec["value"] for rec in main}
    print_table([rec for rec in view["settings"] if rec["value"] != shown.get(rec["name"])])


def run_validate(args: argparse.Namespace) -> int:
    try:
        # Lenient here, strict below: every problem, the model's too, is printed at once.
        loaded = load_settings(env_files=args.env_file, strict=False)
        problems = list(loaded.problems)
        problems += executor_problems(loaded.settings)
        if args.model:
            from mstar.models.loading.placement_check import encoder_placement_problem
            from mstar.settings.checks.preflight import preflight, read_shape
            from mstar.settings.sources import Problem

            path = _model_config(args.model, loaded.settings)
            problems += preflight(loaded.settings,
                                  read_shape(path, loaded.settings.max_image_pixels))
            placement = encoder_placement_problem(loaded.settings, path.parent)
            if placement is not None:  # the map against the model's walk graph
                problems.append(Problem("MSTAR_ENCODER_PLACEMENT", placement,
                                        f"preflight ({path})", error=True))
    except SettingsUsageError as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        return 2
    except SettingsError as exc:
        print(f"error: {exc}")
        return 1
    strict = args.strict or loaded.settings.config_strictness == "strict"
    errors = [p for p in problems if p.error or strict]
    for problem in problems:
        print(f"{'error' if problem in errors else 'warning'}: {problem.message()}")
    for notice in loaded.notices:
        print(f"notice: {notice}")
    if loaded.keys is not None:
        names = ", ".join(key.name for key in loaded.keys.keys)
        print(f"keys file {loaded.keys.path}: {len(loaded.keys.keys)} key(s): {names}")
    if errors:
        print(f"configuration is not usable ({len(errors)} error(s))")
        return 1
    count = len(problems)
    print(f"configuration is usable ({count} warning{'s' if count != 1 else ''})")
    return 0


def generated_files() -> dict[Path, Callable[[], str]]:
    """Every generated file and what generates it: the settings schema's files, and the Grafana
    dashboard from the metric declarations (imported here: the settings sit below the server)."""
    from mstar.api_server.ui.grafana import DASHBOARD_PATH, render_dashboard

    return {**GENERATED, DASHBOARD_PATH: render_dashboard}


def _model_config(model: str, settings) -> Path:
    """The config.json to check ``model`` with: a hub id's (only that file is fetched), or a
    local one's (``config_path``)."""
    from mstar.models.loading.hub import hub_config, hub_id
    from mstar.models.loading.model_error import HubModelError
    from mstar.settings.checks.preflight import config_path

    hub = hub_id(model)
    if hub is None:
        return config_path(model, settings)
    try:
        return hub_config(hub, settings)
    except HubModelError as exc:
        raise SettingsUsageError(str(exc)) from None


def run_docs(args: argparse.Namespace) -> int:
    if args.check:
        stale = stale_files(generated_files())
        for diff in stale.values():
            sys.stdout.write(diff)
        for path in stale:
            print(f"\n{path} is stale; run 'mstar config docs' to regenerate it.",
                  file=sys.stderr)
        if stale:
            return 1
        print("the generated docs are up to date.")
        return 0
    for path in write_generated(generated_files()):
        print(f"wrote {Path(path)}")
    return 0
