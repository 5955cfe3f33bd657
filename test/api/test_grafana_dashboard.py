"""The Grafana dashboard (deploy/grafana/mstar.json) is generated from the metric declarations:
every metric family has a panel with a query of its own name, the committed file is in sync, and
``mstar config docs --check`` covers it."""

from __future__ import annotations

import json

from prometheus_client import Counter

from mstar.api_server.context.metrics import Metrics
from mstar.api_server.ui.grafana import DASHBOARD_PATH, dashboard, metric_families, render_dashboard
from mstar.cli import main
from mstar.cli.config_cmd import generated_files
from mstar.settings.render.generated import stale_files


def _queried(panels: list[dict]) -> str:
    return " ".join(target["expr"] for panel in panels for target in panel["targets"])


def test_every_metric_has_a_panel():
    families = metric_families()
    panels = json.loads(DASHBOARD_PATH.read_text())["panels"]
    assert len(families) >= 15 and len(panels) == len(families)
    titles = {panel["title"].split(" ")[0] for panel in panels}
    assert titles == {family.name for family in families}
    queries = _queried(panels)
    assert "rate(mstar_generation_tokens_total[" in queries
    assert "histogram_quantile(0.99, sum by (le) (rate(mstar_time_to_first_token_seconds_bucket[" in queries
    assert "mstar_kv_cache_usage_ratio" in queries
    assert len({panel["id"] for panel in panels}) == len(panels)


def test_a_new_metric_gets_a_panel():
    metrics = Metrics()
    Counter("mstar_adapter_requests", "Requests per adapter.", ["adapter"], registry=metrics.registry)
    panels = dashboard(list(metrics.registry.collect()))["panels"]
    assert "rate(mstar_adapter_requests_total[" in _queried(panels)


def test_the_docs_check_covers_the_dashboard(tmp_path, capsys):
    assert DASHBOARD_PATH in generated_files()
    assert stale_files({DASHBOARD_PATH: render_dashboard}) == {}, "run 'mstar config docs'"
    assert main(["config", "docs", "--check"]) == 0
    stale = tmp_path / "mstar.json"
    stale.write_text(render_dashboard().replace("mstar_kv_cache_usage_ratio", "mstar_kv_gone"))
    assert "mstar_kv_gone" in stale_files({stale: render_dashboard})[stale]
