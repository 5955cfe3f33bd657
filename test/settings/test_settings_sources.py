"""Env files, precedence and provenance."""

import argparse

import pytest

from mstar.settings import SettingsUsageError, load_settings
from mstar.settings.cli_args import add_settings_arguments, settings_from_args


def load(environ=None, **kwargs):
    return load_settings(environ=environ or {}, **kwargs)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_env_file_syntax_is_handled(tmp_path):
    env = write(tmp_path, "prod.env", "\n".join([
        "# a comment",
        "",
        "export MSTAR_PORT=9001",
        "MSTAR_HOST='0.0.0.0'",
        'MSTAR_MODEL="/models/my model"',
        "MSTAR_LOG_LEVEL=debug  # inline comment",
        "MSTAR_ZMQ_TCP_HOST='abc # not a comment'",
        "OTHER_TOOL_SETTING=1",
    ]))
    loaded = load(env_files=[env])
    s = loaded.settings
    assert (s.port, s.host, s.model, s.log_level) == (9001, "0.0.0.0", "/models/my model", "debug")
    assert s.zmq_tcp_host == "abc # not a comment"
    assert loaded.problems == ()
    assert str(loaded.sources["port"]) == f"{env}:3"
    assert str(loaded.sources["model"]) == f"{env}:5"


def test_bad_lines_warn_with_file_and_line_and_the_rest_applies(tmp_path):
    env = write(tmp_path, "prod.env",
                "MSTAR_PORT=9001\nthis line has no equals sign\nMSTAR_PORT=9002\nMSTAR_SEED=7\n")
    loaded = load(env_files=[env])
    assert (loaded.settings.port, loaded.settings.seed) == (9002, 7)
    locations = sorted(p.location for p in loaded.problems)
    assert locations == [f"{env}:2", f"{env}:3"]
    duplicate = next(p for p in loaded.problems if p.location == f"{env}:3")
    assert f"{env}:1" in duplicate.reason
    assert str(loaded.sources["port"]) == f"{env}:3"


def test_unknown_name_in_env_file_warns_with_its_line(tmp_path):
    env = write(tmp_path, "a.env", "MSTAR_MAX_NUM_SEQ=4\n")
    [problem] = load(env_files=[env]).problems
    assert problem.location == f"{env}:1"
    assert "did you mean MSTAR_MAX_NUM_SEQS?" in problem.reason


def test_malformed_value_in_env_file_names_its_line(tmp_path):
    env = write(tmp_path, "a.env", "\nMSTAR_LAUNCH_WAIT_MS=5ms\n")
    loaded = load(env_files=[env])
    [problem] = loaded.problems
    assert (problem.location, problem.value, problem.used) == (f"{env}:2", "5ms", 5.0)
    assert str(loaded.sources["launch_wait_ms"]) == f"fallback (rejected '5ms' from {env}:2)"


def test_precedence_defaults_files_environment_cli_code(tmp_path):
    first = write(tmp_path, "1.env", "MSTAR_PORT=1001\nMSTAR_SEED=1\nMSTAR_MAX_NUM_SEQS=1\n")
    second = write(tmp_path, "2.env", "MSTAR_PORT=1002\nMSTAR_SEED=2\n")
    loaded = load({"MSTAR_PORT": "1003", "MSTAR_HOST": "h-env", "MSTAR_DEVICE": "cpu"},
                  env_files=[first, second], cli={"port": "1004", "host": "h-cli"},
                  overrides={"port": 1005})
    s = loaded.settings
    assert (s.max_num_seqs, s.seed, s.device, s.host, s.port) == (1, 2, "cpu", "h-cli", 1005)
    assert [str(loaded.sources[n]) for n in ("max_num_seqs", "seed", "device", "host", "port")] == [
        f"{first}:3", f"{second}:2", "environment", "command line", "code"]
    assert str(loaded.sources["dtype"]) == "default"


def test_bad_value_falls_back_to_the_lower_source(tmp_path):
    env = write(tmp_path, "a.env", "MSTAR_LAUNCH_WAIT_MS=7\n")
    loaded = load({"MSTAR_LAUNCH_WAIT_MS": "7ms"}, env_files=[env])
    assert loaded.settings.launch_wait_ms == 7.0
    assert loaded.problems[0].used == 7.0


def test_empty_environment_value_keeps_the_env_file_value(tmp_path):
    env = write(tmp_path, "a.env", "MSTAR_PORT=1234\n")
    assert load({"MSTAR_PORT": " "}, env_files=[env]).settings.port == 1234


def test_missing_env_file_is_a_usage_error(tmp_path):
    with pytest.raises(SettingsUsageError, match="env file not found"):
        load(env_files=[tmp_path / "missing.env"])


def test_python_overrides_follow_the_same_rules():
    loaded = load(overrides={"max_num_seqs": 8, "device_ids": [1, 4],
                             "kv_block_size": -3, "dtype": "fp8"})
    s = loaded.settings
    assert (s.max_num_seqs, s.device_ids, s.kv_block_size, s.dtype) == (
        8, [1, 4], 1, "auto")
    assert {p.variable for p in loaded.problems} == {"MSTAR_KV_BLOCK_SIZE", "MSTAR_DTYPE"}


def test_changed_lists_only_non_default_values():
    loaded = load({"MSTAR_PORT": "9000", "MSTAR_SEED": "0"})
    assert [(name, value) for name, value, _ in loaded.changed()] == [("MSTAR_PORT", 9000)]


def test_cli_flags_set_knobs_and_show_env_names(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    assert "MSTAR_LAUNCH_WAIT_MS" in parser.format_help()
    args = parser.parse_args(["--launch-wait-ms", "2", "--max-num-seqs", "4"])
    loaded = settings_from_args(args)
    assert (loaded.settings.launch_wait_ms, loaded.settings.max_num_seqs) == (2.0, 4)
    assert str(loaded.sources["launch_wait_ms"]) == "command line"
    with pytest.raises(SystemExit) as info:
        settings_from_args(parser.parse_args(["--strict", "--port", "x"]))
    assert info.value.code == 1
    assert "MSTAR_PORT='x'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        settings_from_args(parser.parse_args(["--env-file", str(tmp_path / "nope.env")]))
    assert info.value.code == 2


def test_settings_pickle_for_child_processes():
    import pickle

    settings = load({"MSTAR_API_KEY": "k", "MSTAR_SEED": "3"}).settings
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings and copy.fingerprint() == settings.fingerprint()
    assert load({"MSTAR_SEED": "4"}).settings.fingerprint() != settings.fingerprint()
