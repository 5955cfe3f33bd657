"""MSTAR_MODELS' settings: the list, each model's env file read with the main settings' rules
(strict mode, file and line), and `mstar config show` with each model's settings and
fingerprint. Nothing is loaded (docs/models_many.rst)."""

from __future__ import annotations

import json

import pytest
from test_settings_cli import mstar

from mstar.settings import SettingsError, load_settings
from mstar.settings.knobs.models import parse_models
from mstar.settings.models import model_settings


def test_the_list_is_name_source_pairs_and_a_bad_pair_is_named():
    assert parse_models(" a=/m/a , b=org/name@rev,") == {"a": "/m/a", "b": "org/name@rev"}
    assert parse_models(None) == {}
    for bad, named in (("a", "'a' is not name=source"), ("a=", "'a=' is not name=source"),
                       ("a b=/x", "model name 'a b'"), ("a=/x,a=/y", "'a' is given twice")):
        with pytest.raises(ValueError, match=named):
            parse_models(bad)


def test_each_model_reads_its_own_env_file_after_the_main_ones(tmp_path):
    main = tmp_path / "main.env"
    main.write_text("MSTAR_MAX_MODEL_LEN=512\nMSTAR_SEED=3\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "b.env").write_text("# b's own\nMSTAR_MAX_MODEL_LEN=256\n")
    loaded = load_settings(env_files=[main], environ={
        "MSTAR_MODELS": "a=/m/a,b=/m/b", "MSTAR_MODELS_ENV_DIR": str(tmp_path / "models"),
        "MSTAR_MAX_MODEL_LEN": "1024"})
    models = model_settings(loaded)
    assert list(models) == ["a", "b"]
    a, b = models["a"], models["b"]
    assert (a.settings.model, b.settings.model) == ("/m/a", "/m/b")
    # the environment wins over the main env file, and b's own file over both
    assert (a.settings.max_model_len, b.settings.max_model_len) == (1024, 256)
    assert str(b.sources["max_model_len"]) == f"{tmp_path / 'models' / 'b.env'}:2"
    assert b.settings.seed == 3  # the main env file's, where b's does not say
    assert len({a.settings.fingerprint(), b.settings.fingerprint()}) == 2
    assert model_settings(load_settings(environ={})) == {}  # MSTAR_MODELS unset: one model


def test_a_bad_model_env_file_is_refused_naming_its_file_and_line(tmp_path):
    (tmp_path / "b.env").write_text("MSTAR_SEED=1\nMSTAR_MAX_MODEL_LEN=lots\n")
    environ = {"MSTAR_MODELS": "a=/m/a,b=/m/b", "MSTAR_MODELS_ENV_DIR": str(tmp_path),
               "MSTAR_CONFIG_STRICTNESS": "strict"}
    with pytest.raises(SettingsError, match=rf"{tmp_path / 'b.env'}:2: MSTAR_MAX_MODEL_LEN"):
        model_settings(load_settings(environ=environ))
    for command in (("config", "show"), ("serve",)):  # serve stops before it listens
        result = mstar(*command, env=environ)
        assert result.returncode == 1
        assert f"{tmp_path / 'b.env'}:2: MSTAR_MAX_MODEL_LEN='lots'" in result.stderr


def test_config_show_shows_each_models_settings_and_fingerprint(tmp_path):
    (tmp_path / "b.env").write_text("MSTAR_MAX_MODEL_LEN=256\n")
    env = {"MSTAR_MODELS": "a=/m/a,b=/m/b", "MSTAR_MODELS_ENV_DIR": str(tmp_path)}
    shown = json.loads(mstar("config", "show", "--json", env=env).stdout)
    models = shown["models"]
    assert list(models) == ["a", "b"]
    b = {r["name"]: r for r in models["b"]["settings"]}
    assert b["MSTAR_MAX_MODEL_LEN"]["value"] == 256
    assert b["MSTAR_MAX_MODEL_LEN"]["source"] == f"{tmp_path / 'b.env'}:1"
    assert models["a"]["fingerprint"] != models["b"]["fingerprint"]
    text = mstar("config", "show", env=env).stdout
    assert f"== model b: /m/b (fingerprint {models['b']['fingerprint']}) ==" in text
    section = text.split("== model b:")[1]
    assert "MSTAR_MAX_MODEL_LEN = 256" in section and "MSTAR_SEED" not in section
