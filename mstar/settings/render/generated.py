"""Every file generated from the schema, written by ``mstar config docs`` and checked by
``mstar config docs --check`` in CI: the env-var reference, the JSON Schema, the .env template, the
Helm chart's values and their schema (``helm``). (The CLI adds the Grafana dashboard, generated
from the metric declarations: ``mstar.cli.config_cmd``.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mstar.settings.render.docs import DOCS_PATH, drift, render
from mstar.settings.render.helm import (
    VALUES_PATH,
    VALUES_SCHEMA_PATH,
    render_values,
    render_values_schema,
)
from mstar.settings.render.json_schema import render_schema
from mstar.settings.render.template import render_template

SCHEMA_PATH = DOCS_PATH.parent / "settings.schema.json"
TEMPLATE_PATH = DOCS_PATH.parent / "env.example"
GENERATED: dict[Path, Callable[[], str]] = {
    DOCS_PATH: render, SCHEMA_PATH: render_schema, TEMPLATE_PATH: render_template,
    VALUES_PATH: render_values, VALUES_SCHEMA_PATH: render_values_schema}


def stale_files(generated: dict[Path, Callable[[], str]] = GENERATED) -> dict[Path, str]:
    """path -> diff for each generated file that differs from what generates it."""
    diffs = {path: drift(path, make()) for path, make in generated.items()}
    return {path: diff for path, diff in diffs.items() if diff}


def write_generated(generated: dict[Path, Callable[[], str]] = GENERATED) -> list[Path]:
    for path, make in generated.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(), encoding="utf-8")
    return list(generated)
