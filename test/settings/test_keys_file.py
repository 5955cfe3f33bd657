"""MSTAR_API_KEYS_FILE: its schema, errors naming the file and line, ``mstar keys hash``,
``mstar config validate``, the fingerprint over its content, a reload that keeps the old keys when
the new file is bad, and no OpenTelemetry import with tracing off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mstar.settings import SettingsUsageError, load_settings
from mstar.settings.keys_file import key_hash, read_keys_file
from mstar.settings.reload import plan_reload, reloadable_values
from mstar.settings.sources import reload_settings

VALID = Path(__file__).parent / "env" / "keys.toml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    return path


def _key(name: str, secret: str, extra: str = "") -> str:
    return f'[[keys]]\nname = "{name}"\nhash = "{key_hash(secret)}"\n{extra}\n'


def mstar(*args: str, env: dict | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "mstar", *args], capture_output=True, text=True,
                          env=full, input=stdin, timeout=60)


def test_the_documented_example_file_is_valid():
    table = read_keys_file(VALID)
    batch, app = table.keys
    assert (batch.name, batch.requests_per_minute, batch.priority, batch.rank) == \
        ("batch-jobs", 10, "low", 0)
    assert batch.hash == key_hash("batch-secret") and batch.models == ("SmolLM2-135M-Instruct",)
    assert app.scopes == ("inference", "admin") and app.requests_per_minute is None
    assert table.digest.startswith("sha256:")


@pytest.mark.parametrize(("text", "where"), [
    (_key("a", "x") + _key("b", "y", "priority = 'urgent'"), ":8: keys[1].priority"),
    (_key("a", "x", "requests_per_minute = 0"), ":4: keys[0].requests_per_minute"),
    (_key("a", "x", "scopes = ['root']"), ":4: keys[0].scopes[0]: Input should be"),
    (_key("a", "x", "colour = 'red'"), ":4: keys[0].colour"),
    ('[[keys]]\nname = "a"\nhash = "plain-text-key"\n', ":3: keys[0].hash"),
    (_key("a", "x") + _key("a", "y"), ":6: keys[1].name: the same name as keys[0]"),
    (_key("a", "x") + _key("b", "x"), ":7: keys[1].hash: the same hash as keys[0]"),
    ('[[keys]]\nname = "a\n', ": line 2: "),
    ("", ": keys: Field required"),
])
def test_an_invalid_file_names_file_line_and_field(tmp_path, text, where):
    path = _write(tmp_path, text)
    with pytest.raises(SettingsUsageError) as error:
        load_settings(environ={"MSTAR_API_KEYS_FILE": str(path)})
    assert f"MSTAR_API_KEYS_FILE: {path}{where}" in str(error.value)


def test_an_unreadable_file_fails_closed(tmp_path):
    with pytest.raises(SettingsUsageError, match="missing.toml: cannot be read"):
        load_settings(environ={"MSTAR_API_KEYS_FILE": str(tmp_path / "missing.toml")})


def test_keys_hash_reads_the_key_from_stdin_and_validate_checks_the_file(tmp_path):
    hashed = mstar("keys", "hash", stdin="s3cret\n")
    assert hashed.returncode == 0 and hashed.stdout.strip() == f'hash = "{key_hash("s3cret")}"'
    assert "s3cret" not in hashed.stdout
    assert mstar("keys", "hash", stdin="").returncode == 2
    good = mstar("config", "validate", env={"MSTAR_API_KEYS_FILE": str(VALID)})
    assert good.returncode == 0 and "2 key(s): batch-jobs, app" in good.stdout
    bad = _write(tmp_path, _key("a", "x", "priority = 'urgent'"))
    invalid = mstar("config", "validate", env={"MSTAR_API_KEYS_FILE": str(bad)})
    assert invalid.returncode == 2 and f"{bad}:4: keys[0].priority" in invalid.stderr


def test_the_fingerprint_covers_the_files_content_and_a_reload_applies_it(tmp_path):
    path = _write(tmp_path, _key("a", "x", "requests_per_minute = 10"))
    running = load_settings(environ={"MSTAR_API_KEYS_FILE": str(path)})
    path.write_text(_key("a", "x", "requests_per_minute = 5"))
    fresh = reload_settings(running.inputs, strict=False)
    assert fresh.settings.fingerprint() != running.settings.fingerprint()
    plan = plan_reload(running, fresh)
    assert plan.running.keys.keys[0].requests_per_minute == 5
    assert plan.running.settings.fingerprint() == fresh.settings.fingerprint()
    assert [c.env for c in plan.applied] == ["MSTAR_API_KEYS_FILE (content)"]
    # the workers rebuild the same fingerprint from the values a reload sends them
    values = reloadable_values(plan.running.settings)
    assert values["api_keys_digest"] == fresh.keys.digest


def test_a_bad_reload_raises_so_the_old_keys_stay(tmp_path):
    path = _write(tmp_path, _key("a", "x"))
    running = load_settings(environ={"MSTAR_API_KEYS_FILE": str(path)})
    path.write_text(_key("a", "x", "max_concurrent = -1"))
    with pytest.raises(SettingsUsageError, match=":4: keys\\[0\\].max_concurrent"):
        reload_settings(running.inputs, strict=False)
    assert running.keys.keys[0].max_concurrent is None


def _imported_after(code: str) -> set[str]:
    """The OpenTelemetry modules a fresh interpreter holds after running ``code``."""
    script = (f"import sys; {code}; "
              "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin",
                                              "PYTHONPATH": str(Path(__file__).parents[2])})
    assert result.returncode == 0, result.stderr[-2000:]
    return set(eval(result.stdout.strip().splitlines()[-1]))


def test_no_opentelemetry_import_with_tracing_off():
    """With MSTAR_OTLP_ENDPOINT unset: the settings, the config commands and the worker import no
    OpenTelemetry at all. The API server imports only what FastAPI itself imports (its
    ``fastapi.telemetry`` loads the no-op OpenTelemetry API when that is installed): never the
    SDK or the exporter, which only tracing (``mstar.ipc.tracing``) loads."""
    assert _imported_after("from mstar.cli import main; main(['config', 'show']); "
                           "main(['config', 'validate']); import mstar.settings; "
                           "import mstar.worker.worker, mstar.worker.tracing") == set()
    api = _imported_after("import mstar.api_server.app, mstar.api_server.server")
    assert not {m for m in api if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))}
    assert "opentelemetry.sdk.trace" in _imported_after(
        "from mstar.ipc.tracing import Tracing; Tracing.start('http://127.0.0.1:9', 'x')")
