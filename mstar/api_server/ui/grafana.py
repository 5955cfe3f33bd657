"""The Grafana dashboard (deploy/grafana/mstar.json), generated from the metric declarations: one
panel per metric family the API server's registry declares (``context.metrics.Metrics``, which
also carries what the workers report), so that no metric lacks a panel.

``mstar config docs`` writes it with the other generated files and ``mstar config docs --check``
fails when it is stale (CI runs the check). Import it in Grafana with a Prometheus data source that
scrapes the server's /metrics (with the API key when one is set).

Panels by type: a counter is drawn as its per-second rate, a histogram as its p50/p90/p99 over the
rate window, a gauge as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client.metrics_core import Metric

from mstar.api_server.context.metrics import Metrics

DASHBOARD_PATH = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "mstar.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
QUANTILES = (0.5, 0.9, 0.99)
RATE = "[$__rate_interval]"
PANEL_WIDTH, PANEL_HEIGHT, PER_ROW = 12, 8, 2  # Grafana's grid is 24 wide


def metric_families() -> list[Metric]:
    """Every metric family an API server declares, in declaration order."""
    return list(Metrics().registry.collect())


def _unit(family: Metric) -> str:
    """Grafana's unit for the panel, from the metric's name."""
    if family.name.endswith("_seconds"):
        return "s"
    if family.name.endswith("_ratio"):
        return "percentunit"
    return "ops" if family.type == "counter" else "short"


def _targets(family: Metric) -> list[dict[str, Any]]:
    if family.type == "counter":
        return [{"expr": f"rate({family.name}_total{RATE})", "legendFormat": "__auto", "refId": "A"}]
    if family.type == "histogram":
        return [{"expr": f"histogram_quantile({q}, sum by (le) (rate({family.name}_bucket{RATE})))",
                 "legendFormat": f"p{round(q * 100)}", "refId": chr(ord("A") + i)}
                for i, q in enumerate(QUANTILES)]
    return [{"expr": family.name, "legendFormat": "__auto", "refId": "A"}]


def panel(family: Metric, index: int) -> dict[str, Any]:
    """The time-series panel of one metric family, placed ``index``-th on the grid."""
    title = family.name + (" (per second)" if family.type == "counter" else "")
    targets = [{**target, "datasource": DATASOURCE} for target in _targets(family)]
    return {"id": index + 1, "type": "timeseries", "title": title,
            "description": family.documentation, "datasource": DATASOURCE,
            "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": (index % PER_ROW) * PANEL_WIDTH,
                        "y": (index // PER_ROW) * PANEL_HEIGHT},
            "fieldConfig": {"defaults": {"unit": _unit(family)}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}},
            "targets": targets}


def dashboard(families: list[Metric]) -> dict[str, Any]:
    return {
        "title": "mstar",
        "uid": "mstar",
        "description": "Generated from mstar's metric declarations by `mstar config docs`; do not "
                       "edit it by hand.",
        "editable": True,
        "schemaVersion": 39,
        "tags": ["mstar"],
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus"}]},
        "panels": [panel(family, i) for i, family in enumerate(families)],
    }


def render_dashboard() -> str:
    return json.dumps(dashboard(metric_families()), indent=2) + "\n"
