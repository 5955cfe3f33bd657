"""`mstar config show|validate|docs` as a user runs them."""

import json
import os
import subprocess
import sys

import pytest

from mstar.settings.catalog import KNOBS
from mstar.settings.render.docs import DOCS_PATH, check, render


def mstar(*args, env=None, timeout=30):
    # HF_* mean knobs too (MSTAR_HF_*); conftest sets HF_HUB_OFFLINE for every test
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MSTAR_", "HF_"))}
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "mstar", *args], env=environ,
                          capture_output=True, text=True, timeout=timeout)


def test_show_warns_and_shows_the_fallback_with_its_source():
    result = mstar("config", "show", env={"MSTAR_LAUNCH_WAIT_MS": "5ms"})
    assert result.returncode == 0
    assert "MSTAR_LAUNCH_WAIT_MS" in result.stderr and "5ms" in result.stderr
    assert "MSTAR_LAUNCH_WAIT_MS = 5.0 ms" in result.stdout
    assert "source: fallback (rejected '5ms' from environment)" in result.stdout


def test_show_json_lists_every_knob_with_its_metadata(tmp_path):
    env_file = tmp_path / "prod.env"
    env_file.write_text("MSTAR_PORT=9000\nMSTAR_API_KEY=topsecret\n")
    result = mstar("config", "show", "--json", "--env-file", str(env_file))
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert list(records) == [k.env for k in KNOBS]
    port = records["MSTAR_PORT"]
    assert {"name", "value", "default", "source", "unit", "min", "max", "choices", "category",
            "description"} <= set(port)
    assert (port["value"], port["default"], port["min"], port["max"]) == (9000, 8000, 1, 65535)
    assert port["source"] == f"{env_file}:1"
    assert records["MSTAR_API_KEY"]["value"] == "********"
    assert "topsecret" not in result.stdout + result.stderr
    assert records["MSTAR_DTYPE"]["choices"] == ["auto", "float32", "bfloat16", "float16"]
    assert records["MSTAR_LAUNCH_WAIT_MS"]["unit"] == "ms"


def test_show_changed_keeps_only_non_defaults():
    result = mstar("config", "show", "--json", "--changed", env={"MSTAR_SEED": "5"})
    assert [r["name"] for r in json.loads(result.stdout)] == ["MSTAR_SEED"]


def test_validate_exit_codes(tmp_path):
    ok = mstar("config", "validate", env={"MSTAR_PORT": "x"})
    assert ok.returncode == 0 and "MSTAR_PORT='x'" in ok.stdout
    strict = mstar("config", "validate", "--strict",
                   env={"MSTAR_PORT": "x", "MSTAR_LAUNCH_WAIT": "1"})
    assert strict.returncode == 1
    assert "MSTAR_PORT='x'" in strict.stdout and "did you mean MSTAR_LAUNCH_WAIT_MS" in strict.stdout
    assert mstar("config", "validate", "--strict").returncode == 0
    missing = mstar("config", "validate", "--env-file", str(tmp_path / "missing.env"))
    assert missing.returncode == 2
    assert "env file not found" in missing.stderr and "Traceback" not in missing.stderr


def test_config_commands_import_neither_torch_nor_transformers_nor_ray():
    """Also with MSTAR_DISTRIBUTED_EXECUTOR=ray, whose check (in validate) finds Ray, not imports it."""
    code = ("import sys; from mstar.cli import main; main(['config', 'show']); "
            "main(['config', 'validate']); main(['config', 'docs', '--check']); "
            "import mstar, mstar.settings; heavy = {'torch', 'transformers', 'ray'}; "
            "assert not heavy & sys.modules.keys(), heavy & sys.modules.keys()")
    env = {**os.environ, "MSTAR_DISTRIBUTED_EXECUTOR": "ray", "MSTAR_ZMQ_TRANSPORT": "tcp"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=30, env=env)
    assert result.returncode == 0, result.stderr


def test_config_show_from_the_command_line_imports_no_heavy_library():
    """What keeps `mstar config show` under a second (timed by benchmark/cli_startup.py): from the
    command line, through ``mstar/__main__.py``, it imports none of torch, transformers and Ray."""
    result = mstar("config", "show", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert {"mstar", "pydantic"} <= imported  # the scan sees the imports
    assert not imported & {"torch", "transformers", "ray"}


def test_docs_are_in_sync_with_the_schema():
    assert check() == "", "run 'mstar config docs'"
    text = DOCS_PATH.read_text()
    for knob in KNOBS:
        assert f"``{knob.env}``" in text


def test_docs_check_reports_drift(tmp_path):
    stale = tmp_path / "environment_variables.rst"
    stale.write_text(render().replace("MSTAR_LAUNCH_WAIT_MS", "MSTAR_OLD_NAME", 1))
    diff = check(stale)
    assert "-" in diff and "+" in diff and "MSTAR_OLD_NAME" in diff


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.env)
def test_every_knob_has_a_description_and_category(knob):
    assert knob.description.strip() and knob.category
