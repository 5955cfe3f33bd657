"""Issue 15's findings on the settings layer and the model cache, reproduced as a user meets them.

Each test runs the reproduction from the issue and asserts the fixed behaviour: exit codes, and
messages that name the variable and the file:line. Most commands run in-process (``cli``);
a few run as a subprocess where only that shows the failure (a hang, a traceback). The cache tests
swap the 25-second GGUF conversion for a tiny random model.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import hypothesis
import pytest
import structlog
from hypothesis import strategies as st
from test_settings_cli import mstar

from mstar.cli import main
from mstar.models.loading.resolve import ModelError
from mstar.settings import SettingsError, WorkerSettings, load_settings
from mstar.settings.catalog import KNOBS, Kind
from mstar.settings.cli_args import add_settings_arguments, settings_from_args
from mstar.settings.env_file import MAX_ENV_FILE_BYTES
from mstar.settings.schema import MAX_WAIT_MS

KEY = "sk-prod-123"
FIVE_THOUSAND_DIGITS = "1" * 5000


def env_file(tmp_path, data: bytes | str, name: str = "k.env"):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def load(environ=None, **kwargs):
    return load_settings(environ=environ or {}, **kwargs)


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run ``mstar ARGS`` in-process with only ``env`` as MSTAR_ variables: (exit code, out, err)."""
    for name in [n for n in os.environ if "MSTAR" in n.upper()]:
        monkeypatch.delenv(name)

    def run(*args, env=None):
        with monkeypatch.context() as scoped:
            for name, value in (env or {}).items():
                scoped.setenv(name, value)
            try:
                code = main(list(args))
            except SystemExit as exit_:
                code = exit_.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


# ---- 1. auth silently off -----------------------------------------------------------------------


def test_a_bom_does_not_hide_the_api_key(cli, tmp_path):
    path = env_file(tmp_path, b"\xef\xbb\xbfMSTAR_API_KEY=sk-prod-123\n")
    loaded = load(env_files=[path])
    assert loaded.settings.api_key.get_secret_value() == KEY
    assert str(loaded.sources["api_key"]) == f"{path}:1"
    code, out, err = cli("config", "show", "--changed", "--env-file", str(path))
    assert code == 0 and "MSTAR_API_KEY = ********" in out and KEY not in out + err


@pytest.mark.parametrize("name", ["MSTAR_APIKEY", "\ufeffMSTAR_API_KEY", "mstar_api_key",
                                  "MSTAR_API_KEYS"])
def test_a_near_miss_of_the_api_key_stops_validate_and_serve(cli, name):
    shown = ascii(name)[1:-1]
    code, out, _ = cli("config", "validate", env={name: KEY})
    assert code == 1 and shown in out and "MSTAR_API_KEY is a security setting" in out
    code, _, err = cli("serve", env={name: KEY})
    assert code == 1 and shown in err


def test_serve_with_a_bom_prefixed_name_exits_before_loading_anything():
    serve = mstar("serve", env={"\ufeffMSTAR_API_KEY": KEY})
    assert serve.returncode == 1 and "\\ufeffMSTAR_API_KEY" in serve.stderr
    assert "Traceback" not in serve.stderr and "resolving_model" not in serve.stderr


@pytest.mark.parametrize(("line", "reason"), [
    ("MSTAR_API_KEY=", "set but empty"),
    ("MSTAR_API_KEY='   '", "set but empty"),
    ("MSTAR_API_KEY=sk prod", "visible ASCII without spaces"),
    ("MSTAR_API_KEY='\"sk-prod-123\"'", "wrapped in quotes"),
    ('MSTAR_API_KEY="sk-prod-123', "unterminated quote"),
    ("MSTAR_API_KEY sk-prod-123", "not KEY=value"),
    ("MSTAR API_KEY=sk-prod-123", "contains a space"),
])
def test_a_bad_api_key_line_is_an_error_without_strict(cli, tmp_path, line, reason):
    path = env_file(tmp_path, f"MSTAR_PORT=9000\n{line}\n")
    code, out, _ = cli("config", "validate", "--env-file", str(path))
    assert code == 1
    assert "MSTAR_API_KEY" in out and reason in out
    assert f"{path}:2" in out and "sk-prod-123" not in out


def test_a_second_api_key_line_is_an_error(tmp_path):
    path = env_file(tmp_path, "MSTAR_API_KEY=sk-a\nMSTAR_API_KEY=sk-b\n")
    with pytest.raises(SettingsError) as info:
        load(env_files=[path])
    [problem] = info.value.problems
    assert (problem.variable, problem.location) == ("MSTAR_API_KEY", f"{path}:2")
    assert "already set" in problem.reason


def test_an_empty_api_key_in_the_environment_or_on_the_command_line_is_an_error(cli):
    assert cli("config", "validate", env={"MSTAR_API_KEY": ""})[0] == 1
    code, _, err = cli("serve", "--api-key", " ")
    assert code == 1 and "MSTAR_API_KEY" in err and "empty" in err


def test_other_knobs_stay_lenient(cli):
    code, out, _ = cli("config", "validate", env={"MSTAR_PORT": "", "MSTAR_LAUNCH_WAIT": "1"})
    assert code == 0 and "did you mean MSTAR_LAUNCH_WAIT_MS?" in out


# ---- 2. a quoted value with an inline comment ---------------------------------------------------


@pytest.mark.parametrize("line", [
    'MSTAR_API_KEY="sk-prod-123"  # production key',
    "MSTAR_API_KEY='sk-prod-123' # production key",
    "MSTAR_API_KEY=sk-prod-123 # production key",
    "export\tMSTAR_API_KEY=sk-prod-123",
    "export   MSTAR_API_KEY=\"sk-prod-123\"",
])
def test_quotes_comments_and_export_are_read_like_dotenv(tmp_path, line):
    loaded = load(env_files=[env_file(tmp_path, line + "\n")])
    assert loaded.settings.api_key.get_secret_value() == KEY
    assert loaded.problems == ()


# ---- 4. tracebacks instead of the lenient rule --------------------------------------------------


def test_five_thousand_digits_are_clamped_from_every_source(tmp_path):
    path = env_file(tmp_path, f"MSTAR_SEED={FIVE_THOUSAND_DIGITS}\n")
    loaded = load({"MSTAR_PORT": FIVE_THOUSAND_DIGITS, "MSTAR_LAUNCH_WAIT_MS": FIVE_THOUSAND_DIGITS,
                   "MSTAR_CUDA_GRAPH_BATCH_SIZES": f"1,{FIVE_THOUSAND_DIGITS}"},
                  env_files=[path], overrides={"max_num_seqs": 10**5000})
    s = loaded.settings
    assert (s.port, s.seed, s.max_num_seqs) == (65535, 2**63 - 1, 2**31 - 1)
    assert s.launch_wait_ms == MAX_WAIT_MS
    assert s.cuda_graph_batch_sizes == WorkerSettings().cuda_graph_batch_sizes  # bad element
    assert all(len(p.message()) < 300 for p in loaded.problems)


def test_every_numeric_knob_has_a_maximum_for_long_numbers_to_clamp_to():
    numeric = [k for k in KNOBS if k.kind in (Kind.INT, Kind.FLOAT, Kind.INT_LIST)]
    assert numeric and all(k.maximum is not None for k in numeric)


def test_five_thousand_digits_on_the_command_line(capsys):
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser)
    loaded = settings_from_args(parser.parse_args(["--port", FIVE_THOUSAND_DIGITS]))
    assert loaded.settings.port == 65535
    assert "above the maximum 65535" in loaded.problems[0].message()
    serve = mstar("serve", "--strict", "--port", FIVE_THOUSAND_DIGITS,
                  env={"MSTAR_PORT": FIVE_THOUSAND_DIGITS})
    assert serve.returncode == 1 and "Traceback" not in serve.stderr
    assert "MSTAR_PORT='1111" in serve.stderr and "(5000 characters)" in serve.stderr


def test_a_path_that_cannot_be_expanded_warns_and_falls_back(cli):
    code, out, _ = cli("config", "validate", env={"MSTAR_CACHE_DIR": "~nosuchuser/x"})
    assert code == 0
    assert "MSTAR_CACHE_DIR='~nosuchuser/x' cannot expand '~nosuchuser'" in out
    assert load({"MSTAR_CACHE_DIR": "~nosuchuser/x"}).settings.cache_dir == WorkerSettings().cache_dir


# ---- 5. unbounded env-file reading --------------------------------------------------------------


def test_special_files_and_large_files_are_usage_errors(cli, tmp_path):
    big = env_file(tmp_path, b"#" * (MAX_ENV_FILE_BYTES + 1), "big.env")
    cases = {"/dev/zero": "a character device", str(tmp_path): "a directory",
             str(big): f"larger than {MAX_ENV_FILE_BYTES} bytes"}
    for path, reason in cases.items():
        code, _, err = cli("config", "validate", "--env-file", path)
        assert code == 2 and path in err and reason in err
    code, _, err = cli("serve", "--env-file", "/dev/zero")
    assert code == 2 and "a character device" in err


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "fifo.env"
    os.mkfifo(fifo)
    result = mstar("config", "validate", "--env-file", str(fifo), timeout=20)
    assert result.returncode == 2 and f"{fifo} is a FIFO" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_file_of_exactly_the_limit_is_read(tmp_path):
    body = b"MSTAR_PORT=9000\n"
    path = env_file(tmp_path, body + b"#" * (MAX_ENV_FILE_BYTES - len(body)))
    assert load(env_files=[path]).settings.port == 9000


# ---- 6. silent or inconsistent parsing ----------------------------------------------------------


@pytest.mark.parametrize(("env", "raw"), [
    ("MSTAR_PORT", "５"), ("MSTAR_PORT", "٨٠٨٠"), ("MSTAR_LAUNCH_WAIT_MS", "٨"),
    ("MSTAR_PORT", "1_000"), ("MSTAR_LAUNCH_WAIT_MS", "1_000"),
    ("MSTAR_PORT", "0x10"), ("MSTAR_LAUNCH_WAIT_MS", "0x10"),
    ("MSTAR_CUDA_GRAPH_BATCH_SIZES", "1,٢"),
])
def test_numbers_are_plain_ascii_decimals_for_every_numeric_knob(env, raw):
    loaded = load({env: raw})
    [problem] = loaded.problems
    assert problem.variable == env and "fallback" in str(loaded.sources[problem.variable[6:].lower()])


def test_unused_env_file_lines_warn_with_file_and_line(tmp_path):
    path = env_file(tmp_path, "\n".join([
        "mstar_port=9001",             # 1: another case
        "MSTAR SEED=3",                # 2: a key with a space
        "MSTAR_HOST='0.0.0.0",         # 3: unterminated quote
        "just some words",             # 4: not KEY=value
        "export\tMSTAR_NUM_WORKERS=2",  # 5: export and a tab
    ]) + "\n")
    loaded = load(env_files=[path])
    assert (loaded.settings.port, loaded.settings.seed, loaded.settings.host) == (8000, 0, "127.0.0.1")
    assert loaded.settings.num_workers == 2
    reasons = {p.location: p.reason for p in loaded.problems}
    assert "did you mean MSTAR_PORT?" in reasons[f"{path}:1"]
    assert "contains a space" in reasons[f"{path}:2"]
    assert "unterminated quote" in reasons[f"{path}:3"]
    assert "not KEY=value" in reasons[f"{path}:4"]
    assert len(reasons) == 4


def test_a_lowercase_name_in_the_environment_warns_with_a_suggestion():
    [problem] = load({"mstar_max_num_seqs": "4"}).problems
    assert problem.reason.endswith("did you mean MSTAR_MAX_NUM_SEQS?") and not problem.error


# ---- issue 8: settings configure nothing; entry points report ----------------------------------


def test_load_settings_configures_and_prints_nothing(capsys):
    before = structlog.get_config()
    load({"MSTAR_PORT": "x", "MSTAR_LOG_LEVEL": "debug"})
    assert structlog.get_config() == before
    assert capsys.readouterr() == ("", "")
    code = "import sys, mstar.settings; assert 'mstar.logging_setup' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0


def test_settings_warnings_come_before_the_model_in_serve_and_llm(cli, tmp_path, capsys):
    code, _, err = cli("serve", str(tmp_path / "missing"), env={"MSTAR_LAUNCH_WAIT_MS": "5ms"})
    assert code == 1
    assert 0 <= err.index("MSTAR_LAUNCH_WAIT_MS") < err.index("does not exist")
    from mstar import LLM

    with pytest.raises(ModelError):
        LLM(str(tmp_path / "missing"), launch_wait_ms="5ms")
    assert "setting_rejected" in capsys.readouterr().err


# ---- bounded fuzzing: no input reaches a traceback --------------------------------------------


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(text=st.lists(st.sampled_from(
    list("MSTAR_PORTAPIKEYmstar=#'\" \t\n\\x5٨５_0") + ["export ", "\ufeff", "MSTAR_API_KEY="]),
    max_size=40).map("".join))
def test_any_env_file_loads_or_fails_closed(text):
    with tempfile.TemporaryDirectory() as directory:
        path = env_file(Path(directory), text)
        try:
            loaded = load(env_files=[path])
        except SettingsError as error:
            assert any(p.error for p in error.problems)
            assert all("MSTAR_API_KEY" in p.message() for p in error.problems if p.error)
            return
    assert all(not p.error for p in loaded.problems)
