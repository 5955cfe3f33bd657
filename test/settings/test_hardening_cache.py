"""Issue 15, item 9 (and the cache part of 8): a broken converted-model cache is recovered, and a
model that fails to load says so in one line; split from test_hardening_settings.py."""

from __future__ import annotations

import os
import stat

import pytest
import structlog
from test_settings_cli import mstar

from mstar.logging_setup import configure_logging
from mstar.models.loading import builtin
from mstar.models.loading.resolve import BUILTIN_MODEL_NAME, resolve_model_dir
from mstar.settings import WorkerSettings

KEY = "sk-prod-123"
FIVE_THOUSAND_DIGITS = "1" * 5000


# ---- 9. a broken cache is recovered ------------------------------------------------------------


class FakeConversion:
    """Stands in for the GGUF loading: the tiny Llama of conftest, counting conversions."""

    def __init__(self, model_dir):
        self.model_dir = model_dir
        self.calls = 0

    def __call__(self, gguf):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.calls += 1
        return (AutoModelForCausalLM.from_pretrained(self.model_dir),
                AutoTokenizer.from_pretrained(self.model_dir))


@pytest.fixture
def conversion(tiny_model_dir):
    return FakeConversion(tiny_model_dir("llama"))


def _resolve(cache_dir, conversion, verify=False):
    settings = WorkerSettings(cache_dir=cache_dir, verify_cache=verify)
    with structlog.testing.capture_logs() as logs:
        path = resolve_model_dir(settings, builtin.Conversion(load=conversion, save=builtin.save_model))
    return path, [e for e in logs if e["log_level"] == "warning"]


def test_a_truncated_cache_is_converted_again_with_a_warning(tmp_path, conversion):
    path, _ = _resolve(tmp_path, conversion)
    weights = path / "model.safetensors"
    size = weights.stat().st_size
    os.truncate(weights, size // 2)
    again, [warning] = _resolve(tmp_path, conversion)
    assert again == path and conversion.calls == 2 and weights.stat().st_size == size
    assert warning["event"] == "builtin_model_cache_invalid"
    assert f"model.safetensors is {size // 2} bytes" in warning["reason"]
    assert _resolve(tmp_path, conversion) == (path, []) and conversion.calls == 2


def _flip_a_byte(path):
    with open(path, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0xFF]))


def test_same_size_corruption_is_found_when_verifying_or_after_a_crash(tmp_path, conversion):
    path, _ = _resolve(tmp_path, conversion)
    _flip_a_byte(path / "model.safetensors")
    assert _resolve(tmp_path, conversion) == (path, []) and conversion.calls == 1  # sizes only: not seen
    _, [warning] = _resolve(tmp_path, conversion, verify=True)
    assert "does not match the SHA-256" in warning["reason"] and conversion.calls == 2

    _flip_a_byte(path / "model.safetensors")
    crashed = path.parent / f".{BUILTIN_MODEL_NAME}.tmp-12345"
    crashed.mkdir()
    _, [warning] = _resolve(tmp_path, conversion)
    assert "does not match the SHA-256" in warning["reason"] and conversion.calls == 3
    assert not crashed.exists()


@pytest.mark.parametrize(("umask", "directory", "file"), [(0o022, 0o755, 0o644),
                                                          (0o077, 0o700, 0o600)])
def test_cache_permissions_follow_the_umask(tmp_path, conversion, umask, directory, file):
    old = os.umask(umask)
    try:
        path, _ = _resolve(tmp_path, conversion)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == directory
    assert stat.S_IMODE(path.parent.stat().st_mode) == directory
    assert {stat.S_IMODE(f.stat().st_mode) for f in path.iterdir()} == {file}


def test_a_truncated_local_model_is_one_line_naming_the_file_and_the_fix(tmp_path, tiny_model_dir):
    import shutil

    model = shutil.copytree(tiny_model_dir("llama"), tmp_path / "m")
    os.truncate(model / "model.safetensors", 1000)
    result = mstar("serve", str(model))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if "model_error" in x]
    assert f"{model / 'model.safetensors'}' is truncated or corrupt" in line
    assert "save it again with transformers' save_pretrained" in line


def test_tracebacks_show_local_variables_only_at_debug(capsys):
    log = structlog.get_logger("test")
    for level, shows_locals in (("info", False), ("debug", True)):
        configure_logging(level)
        secret_local = "value-of-a-local-variable"  # noqa: F841 (read from the frame)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
        err = capsys.readouterr().err
        assert "RuntimeError: boom" in err
        assert ("value-of-a-local-variable" in err) == shows_locals, level
    configure_logging("info")
