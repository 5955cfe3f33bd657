"""The operator's tools without a server: reloadable knobs, the JSON Schema and template, `config
diff` exit codes, model-aware preflight, and a step loop switched between serial and overlapped
mid-run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from mstar.cli import main
from mstar.settings import WorkerSettings, load_settings
from mstar.settings.catalog import BY_ENV
from mstar.settings.env_file import read_env_file
from mstar.settings.reload import plan_reload
from mstar.settings.reloadable import RELOADABLE
from mstar.settings.render.generated import stale_files
from mstar.settings.render.json_schema import json_schema

ENV_DIR = Path(__file__).parent / "env"
USABLE_ENV_FILES = sorted(p for p in ENV_DIR.glob("*.env") if p.name != "bad.env")


def test_every_reloadable_name_is_a_knob():
    assert set(WorkerSettings.model_fields) >= RELOADABLE
    assert "max_concurrent_requests" in RELOADABLE and "model" not in RELOADABLE


def test_generated_docs_schema_and_template_are_in_sync():
    assert stale_files() == {}, "run 'mstar config docs'"


def _as_document(path: Path) -> dict[str, str]:
    entries, problems = read_env_file(path)
    assert not problems
    return {e.key: e.value for e in entries}


@pytest.mark.parametrize("path", USABLE_ENV_FILES, ids=lambda p: p.name)
def test_schema_accepts_the_env_files_the_tests_use(path):
    jsonschema.Draft202012Validator(json_schema()).validate(_as_document(path))


def test_schema_accepts_typed_values_and_rejects_mistakes():
    validator = jsonschema.Draft202012Validator(json_schema())
    validator.validate({"MSTAR_PORT": 9000, "MSTAR_ENGINE_STEP_SYNC": True, "HOME": "/root",
                        "MSTAR_DTYPE": "bfloat16", "MSTAR_MAX_MODEL_LEN": None})
    errors = list(validator.iter_errors(_as_document(ENV_DIR / "bad.env")))
    assert len(errors) == 2  # the malformed number and the misspelled name
    for bad in ({"MSTAR_PORT": 70000}, {"MSTAR_DTYPE": "fp8"}, {"MSTAR_LOG_LEVEL": "loud"},
                {"MSTAR_API_KEY": ""}, {"MSTAR_SPEC_PEEK_FOR_FAIRNESS": "maybe"}):
        assert list(validator.iter_errors(bad)), bad


def test_template_sets_every_knob_to_its_default(tmp_path, capsys):
    template = tmp_path / "example.env"
    assert main(["config", "template"]) == 0
    text = capsys.readouterr().out
    entries = re.findall(r"^# (MSTAR_[A-Z0-9_]+=.*)$", text, re.M)
    assert sorted(e.split("=")[0] for e in entries) == sorted(BY_ENV)
    # Uncommented, the lines with a value change nothing (unset knobs are left blank).
    template.write_text("\n".join(e for e in entries if not e.endswith("=")) + "\n")
    loaded = load_settings(env_files=[template], environ={})
    assert loaded.problems == () and loaded.settings == WorkerSettings()


def test_reload_plan_applies_only_reloadable_changes():
    running = load_settings(env_files=[ENV_DIR / "base.env"], environ={})
    fresh = load_settings(env_files=[ENV_DIR / "tuned.env"], environ={})
    plan = plan_reload(running, fresh)
    applied = {c.env for c in plan.applied}
    assert applied == {"MSTAR_MAX_CONCURRENT_REQUESTS", "MSTAR_REQUEST_TIMEOUT_S",
                       "MSTAR_MAX_CONSECUTIVE_SPEC_STEPS", "MSTAR_SPEC_YIELD_HOLD_MS"}
    assert [c.env for c in plan.needs_restart] == ["MSTAR_MAX_NUM_SEQS"]
    now = plan.running.settings
    assert now.max_concurrent_requests == 20 and now.max_num_seqs == 32
    assert str(plan.running.sources["max_concurrent_requests"]).endswith("tuned.env:2")
    assert now.fingerprint() != running.settings.fingerprint()


def test_fingerprint_covers_whether_a_secret_is_set_never_its_value():
    assert WorkerSettings(api_key="a").fingerprint() == WorkerSettings(api_key="b").fingerprint()
    assert WorkerSettings(api_key="a").fingerprint() != WorkerSettings().fingerprint()


def test_diff_exit_codes(capsys, tmp_path):
    base, tuned = str(ENV_DIR / "base.env"), str(ENV_DIR / "tuned.env")
    assert main(["config", "diff", base, base]) == 0
    assert main(["config", "diff", base, tuned]) == 1
    out = capsys.readouterr().out
    assert "MSTAR_MAX_NUM_SEQS" in out and "base.env:3" in out and "tuned.env:3" in out
    assert "MSTAR_LOG_LEVEL" not in out
    assert main(["config", "diff", base]) == 2
    assert main(["config", "diff", base, str(tmp_path / "missing.env")]) == 2
    assert main(["config", "diff", base, "--url", "http://127.0.0.1:9"]) == 2


def _model_dir(tmp_path: Path, limit: int) -> Path:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
              "max_position_embeddings": limit}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


# Prints whether torch and transformers were imported: what keeps the preflight fast (timed by
# benchmark/cli_startup.py).
PREFLIGHT = ("import sys; from mstar.cli import main; code = main(sys.argv[1:]); "
             "print('loaded', 'torch' in sys.modules, 'transformers' in sys.modules); "
             "sys.exit(code)")


def _preflight(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PREFLIGHT, "config", "validate", *argv],
                          capture_output=True, text=True, env=env, timeout=60)


def _refused(model: Path, env: str) -> str:
    """What ``validate --model`` prints for settings it refuses (exit 1)."""
    env_file = model / "preflight.env"
    env_file.write_text(env)
    result = _preflight("--model", str(model), "--env-file", str(env_file))
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stdout


def test_preflight_catches_an_oversized_max_model_len_without_torch(tmp_path):
    out = _refused(_model_dir(tmp_path, 512),
                   "MSTAR_MAX_MODEL_LEN=4096\nMSTAR_DEVICE=cpu\nMSTAR_NUM_KV_BLOCKS=8\n"
                   "MSTAR_KV_BLOCK_SIZE=16\nMSTAR_LAUNCH_WAIT_MS=5ms\n")
    # Every problem at once: the settings' own warning and the model's errors.
    assert "MSTAR_LAUNCH_WAIT_MS='5ms'" in out
    assert "MSTAR_MAX_MODEL_LEN: 4096 exceeds the model's limit of 512 tokens" in out
    assert "MSTAR_NUM_KV_BLOCKS: the KV cache holds 128 tokens" in out
    assert out.split("loaded ")[1].split() == ["False", "False"]  # neither torch nor transformers


def test_preflight_counts_the_kv_cache_in_its_own_dtype(tmp_path):
    """float32 activations with a bf16 KV cache: 2 bytes per value (3 layers x 2 KV heads x 16
    dims, keys and values: 384 bytes a token); and a float32 cache under bf16 activations is
    refused, as the engine refuses it."""
    model = _model_dir(tmp_path, 512)
    out = _refused(model, "MSTAR_DEVICE=cpu\nMSTAR_DTYPE=float32\nMSTAR_KV_CACHE_DTYPE=bfloat16\n"
                   "MSTAR_CPU_KV_CACHE_GB=0.00001\n")
    assert "(384 bytes per token in bfloat16)" in out
    out = _refused(model, "MSTAR_DEVICE=cpu\nMSTAR_DTYPE=bfloat16\nMSTAR_KV_CACHE_DTYPE=float32\n")
    assert "MSTAR_KV_CACHE_DTYPE: MSTAR_KV_CACHE_DTYPE=float32 needs activations" in out
    assert out.split("loaded ")[1].split() == ["False", "False"]


def test_preflight_passes_a_fitting_configuration(tmp_path):
    model = _model_dir(tmp_path, 512)
    env_file = tmp_path / "ok.env"
    env_file.write_text("MSTAR_DEVICE=cpu\nMSTAR_DTYPE=float32\nMSTAR_MAX_NUM_SEQS=4\n")
    result = _preflight("--model", str(model), "--env-file", str(env_file))
    assert result.returncode == 0, result.stdout
    assert "configuration is usable (0 warnings)" in result.stdout
    missing = _preflight("--model", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "cannot read the model's config" in missing.stderr


def test_preflight_says_when_max_model_len_cannot_hold_one_image(tmp_path):
    """SmolVLM-256M's shape: 512-pixel tiles of 64 tokens, images resized to 2048 pixels."""
    text = {"hidden_size": 576, "num_attention_heads": 9, "num_key_value_heads": 3,
            "num_hidden_layers": 30, "max_position_embeddings": 8192}
    config = {"architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3",
              "scale_factor": 4, "text_config": text,
              "vision_config": {"image_size": 512, "patch_size": 16}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"size": {"longest_edge": 2048}, "do_image_splitting": True}))
    env_file = tmp_path / "short.env"
    env_file.write_text("MSTAR_DEVICE=cpu\nMSTAR_DTYPE=float32\nMSTAR_MAX_MODEL_LEN=1024\n")
    result = _preflight("--model", str(tmp_path), "--env-file", str(env_file))
    assert result.returncode == 1, result.stdout
    # 4 x 4 tiles and the global image, 64 tokens each, plus the tile tags.
    assert "MSTAR_MAX_MODEL_LEN: 1024 tokens cannot hold one image at the largest allowed " \
           "size (1123 tokens" in result.stdout
    env_file.write_text("MSTAR_DEVICE=cpu\nMSTAR_DTYPE=float32\nMSTAR_MAX_MODEL_LEN=1024\n"
                        "MSTAR_MAX_IMAGE_PIXELS=262144\n")  # 512 x 512: one tile + global
    result = _preflight("--model", str(tmp_path), "--env-file", str(env_file))
    assert "cannot hold one image" not in result.stdout, result.stdout


def test_step_loop_switches_between_serial_and_overlapped_mid_run(tiny_model_dir, make_engine):
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.settings.reload import with_values

    model = tiny_model_dir("llama")
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    prompts = {f"r{i}": [5 + i, 17, 42, 7] for i in range(4)}

    def generate(switch: bool) -> dict[str, list[int]]:
        engine = make_engine(model)
        for rid, ids in prompts.items():
            engine.add_request(rid, ids, params)
        tokens: dict[str, list[int]] = {rid: [] for rid in prompts}
        caps = [0, 1024, 0]  # serial, overlapped again, serial
        steps = 0
        while engine.has_unfinished_requests():
            steps += 1
            if switch and steps % 6 == 0 and caps:
                engine.apply_settings(with_values(engine.settings,
                                                  {"max_consecutive_spec_steps": caps.pop(0)}))
            for out in engine.step():
                tokens[out.request_id] += out.new_token_ids
        engine.shutdown()
        return tokens

    reference, switched = generate(False), generate(True)
    assert switched == reference
    assert all(len(t) == 24 for t in switched.values())


def test_qwen2_5_vl_image_budget_reads_the_transformers_5_pixel_cap(tmp_path):
    """transformers 5 saves Qwen2.5-VL's pixel cap as size.longest_edge, not max_pixels."""
    from mstar.settings.checks.image_budget import max_image_tokens

    config = {"model_type": "qwen2_5_vl", "vision_config": {"patch_size": 14, "spatial_merge_size": 2}}
    pre = tmp_path / "preprocessor_config.json"
    pre.write_text(json.dumps({"size": {"shortest_edge": 3136, "longest_edge": 28 * 28 * 100}}))
    # 100 merged 28x28 patches at the cap, plus the vision start and end tokens.
    assert max_image_tokens(config, tmp_path / "config.json", max_pixels=10**9) == 102
