"""The lenient rule: every knob, every kind of bad value, and strict mode."""

import math
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from mstar.settings import SettingsError, SettingsUsageError, WorkerSettings, load_settings
from mstar.settings.catalog import KNOBS


def load(environ, **kwargs):
    return load_settings(environ=environ, **kwargs)


KEYS_FILE = Path(__file__).parent / "env" / "keys.toml"

# One valid text value per knob and the value it must produce. Adding a knob without a row fails
# test_every_knob_has_a_valid_example.
VALID = {
    "MSTAR_LAUNCH_WAIT_MS": ("2.5", 2.5),
    "MSTAR_MAX_CONSECUTIVE_SPEC_STEPS": ("7", 7),
    "MSTAR_SPEC_PEEK_FOR_FAIRNESS": ("off", False),
    "MSTAR_PRE_PLAN_SPEC": ("No", False),
    "MSTAR_SPEC_YIELD_HOLD_MS": ("0.25", 0.25),
    "MSTAR_PY_SWITCH_INTERVAL_SEC": ("0.001", 0.001),
    "MSTAR_RECOMPILE_LIMIT": ("100", 100),
    "MSTAR_ENGINE_STEP_SYNC": ("yes", True),
    "MSTAR_PHASE_TIMING": ("50", 50),
    "MSTAR_HOST": ("0.0.0.0", "0.0.0.0"),
    "MSTAR_PORT": ("8080", 8080),
    "MSTAR_API_KEY": ("s3cret", SecretStr("s3cret")),
    "MSTAR_MAX_CONCURRENT_REQUESTS": ("3", 3),
    "MSTAR_MAX_BODY_MB": ("0.5", 0.5),
    "MSTAR_STREAM_INTERVAL": ("4", 4),
    "MSTAR_UNKNOWN_REQUEST_FIELDS": ("Reject", "reject"),
    "MSTAR_TOOL_CALL_PARSER": ("hermes", "hermes"),
    "MSTAR_SERVED_MODEL_NAMES": ("gpt-4o-mini,default", "gpt-4o-mini,default"),
    "MSTAR_REQUEST_TIMEOUT_S": ("12", 12.0),
    "MSTAR_SHUTDOWN_TIMEOUT_S": ("0", 0.0),
    "MSTAR_STARTUP_TIMEOUT_S": ("60", 60.0),
    "MSTAR_LOG_LEVEL": ("DEBUG", "debug"),
    "MSTAR_LOG_FORMAT": ("json", "json"),
    "MSTAR_GRAMMAR_MAX_SCHEMA_KB": ("128", 128.0),
    "MSTAR_GRAMMAR_MAX_DEPTH": ("32", 32),
    "MSTAR_GRAMMAR_MAX_ENUM_ENTRIES": ("500", 500),
    "MSTAR_GRAMMAR_MAX_REGEX_LENGTH": ("1000", 1000),
    "MSTAR_GRAMMAR_COMPILE_TIMEOUT_S": ("5.5", 5.5),
    "MSTAR_GRAMMAR_CACHE_MB": ("64", 64.0),
    "MSTAR_MAX_STOP_STRINGS": ("8", 8),
    "MSTAR_MAX_LOGIT_BIAS_ENTRIES": ("300", 300),
    "MSTAR_MAX_TOOLS": ("16", 16),
    "MSTAR_MAX_MESSAGES": ("500", 500),
    "MSTAR_MAX_UNREAD_OUTPUT_KB": ("64", 64.0),
    "MSTAR_MAX_PROMPT_CHARS": ("100000", 100000),
    "MSTAR_SPECIAL_TOKENS_IN_CONTENT": ("reject", "reject"),
    "MSTAR_MODEL": ("/models/qwen", "/models/qwen"),
    "MSTAR_CACHE_DIR": ("/tmp/mstar-cache", Path("/tmp/mstar-cache")),
    "MSTAR_VERIFY_CACHE": ("1", True),
    "MSTAR_DTYPE": ("bfloat16", "bfloat16"),
    "MSTAR_QUANTIZATION": ("q4", "q4"),
    "MSTAR_KV_CACHE_DTYPE": ("bfloat16", "bfloat16"),
    "MSTAR_DEVICE": ("cpu", "cpu"),
    "MSTAR_MAX_MODEL_LEN": ("2048", 2048),
    "MSTAR_MAX_NUM_SEQS": ("32", 32),
    "MSTAR_MAX_NUM_BATCHED_TOKENS": ("512", 512),
    "MSTAR_MAX_PREFILL_CHUNK_TOKENS": ("128", 128),
    "MSTAR_PREFILL_SHARE_BESIDE_DECODES": ("0.25", 0.25),
    "MSTAR_KV_BLOCK_SIZE": ("32", 32),
    "MSTAR_NUM_KV_BLOCKS": ("100", 100),
    "MSTAR_TALKER_NUM_KV_BLOCKS": ("64", 64),
    "MSTAR_SPEECH_CHUNK_FRAMES": ("50", 50),
    "MSTAR_SPEECH_LEFT_CONTEXT": ("0", 0),
    "MSTAR_KV_CACHE_MEMORY_FRACTION": ("0.5", 0.5),
    "MSTAR_CPU_BIND": ("false", False),
    "MSTAR_CPU_KV_CACHE_GB": ("1.5", 1.5),
    "MSTAR_ENABLE_PREFIX_CACHING": ("false", False),
    "MSTAR_ATTENTION_BACKEND": ("Triton", "triton"),
    "MSTAR_CUDA_GRAPH": ("0", False),
    "MSTAR_CUDA_GRAPH_BATCH_SIZES": ("1, 2,8", [1, 2, 8]),
    "MSTAR_COMPILE": ("on", True),
    "MSTAR_NUM_WORKERS": ("2", 2),
    "MSTAR_TENSOR_PARALLEL_SIZE": ("2", 2),
    "MSTAR_DEVICE_IDS": ("3,1", [3, 1]),
    "MSTAR_TORCH_NUM_THREADS": ("1", 1),
    "MSTAR_SEED": ("1234", 1234),
    "MSTAR_SPECULATIVE_METHOD": ("NGRAM", "ngram"),
    "MSTAR_SPECULATIVE_GATE": ("off", False),
    "MSTAR_NUM_SPECULATIVE_TOKENS": ("3", 3),
    "MSTAR_NGRAM_MIN_N": ("1", 1),
    "MSTAR_NGRAM_MAX_N": ("5", 5),
    "MSTAR_SPECULATIVE_DRAFT_MODEL": ("/models/draft", "/models/draft"),
    "MSTAR_SPECULATIVE_MIN_ACCEPTANCE": ("0.5", 0.5),
    "MSTAR_ZMQ_TRANSPORT": ("tcp", "tcp"),
    "MSTAR_ZMQ_TCP_HOST": ("10.0.0.2", "10.0.0.2"),
    "MSTAR_ZMQ_TCP_BASE_PORT": ("31000", 31000),
    "MSTAR_DIST_MASTER_ADDR": ("10.0.0.3", "10.0.0.3"),
    "MSTAR_DIST_MASTER_PORT": ("29600", 29600),
    "MSTAR_REMOTE_WORKERS": ("1", 1),
    "MSTAR_DISTRIBUTED_EXECUTOR": ("ray", "ray"),
    "MSTAR_RAY_ADDRESS": ("10.0.0.1:6379", "10.0.0.1:6379"),
    "MSTAR_RAY_PLACEMENT": ("spread", "spread"),
    "MSTAR_SOCKET_DIR": ("/tmp/socks", Path("/tmp/socks")),
    "MSTAR_CLUSTER_SECRET": ("cluster-s3cret", SecretStr("cluster-s3cret")),
    "MSTAR_MAX_MESSAGE_MB": ("16", 16.0),
    "MSTAR_LIVENESS_INTERVAL_S": ("3.5", 3.5),
    "MSTAR_ALLOWED_MEDIA_DOMAINS": ("images.example.com", "images.example.com"),
    "MSTAR_MAX_IMAGES_PER_REQUEST": ("2", 2),
    "MSTAR_LORA_MODULES": ("sql=/a/sql,chat=/a/chat", "sql=/a/sql,chat=/a/chat"),
    "MSTAR_MAX_LORA_RANK": ("64", 64),
    "MSTAR_MAX_LORAS": ("8", 8),
    "MSTAR_ALLOW_RUNTIME_LORA_UPDATING": ("true", True),
    "MSTAR_LORA_DIR": ("/srv/adapters", Path("/srv/adapters")),
    "MSTAR_MODELS": ("a=/m/a,b=org/b", "a=/m/a,b=org/b"),
    "MSTAR_MODELS_ENV_DIR": ("/etc/mstar/models", Path("/etc/mstar/models")),
    "MSTAR_MODELS_KEEP_ALIVE_S": ("-1", -1.0),
    "MSTAR_MODELS_MEMORY_BUDGET_MB": ("4096", 4096.0),
    "MSTAR_MODELS_LOAD_WAIT_S": ("30", 30.0),
    "MSTAR_MAX_IMAGE_PIXELS": ("1048576", 1048576),
    "MSTAR_MAX_IMAGE_BYTES": ("1000000", 1000000),
    "MSTAR_MAX_IMAGE_PIXELS_PER_REQUEST": ("2097152", 2097152),
    "MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT": ("4194304", 4194304),
    "MSTAR_MEDIA_FETCH_MAX_CONCURRENT": ("3", 3),
    "MSTAR_MEDIA_FETCH_CONNECT_TIMEOUT_S": ("2.5", 2.5),
    "MSTAR_MEDIA_FETCH_TIMEOUT_S": ("12", 12.0),
    "MSTAR_MEDIA_FETCH_MIN_BYTES_PER_S": ("0", 0),
    "MSTAR_MAX_ENCODER_TOKENS_PER_STEP": ("512", 512),
    "MSTAR_ENCODER_CACHE_MB": ("64.5", 64.5),
    "MSTAR_CONFIG_STRICTNESS": ("warn", "warn"),
    "MSTAR_TOOL_CALL_UNDECLARED": ("drop", "drop"),
    "MSTAR_REASONING_PARSER": ("think", "think"),
    "MSTAR_RESPONSES_STORE_CAPACITY": ("16", 16),
    "MSTAR_RESPONSES_STORE_TTL_S": ("60", 60.0),
    "MSTAR_RESPONSES_STORE_PER_KEY": ("off", False),
    "MSTAR_RESPONSES_STORE_MAX_MB": ("8.5", 8.5),
    "MSTAR_HTTP_HEADER_TIMEOUT_S": ("3", 3.0),
    "MSTAR_EMBEDDING_POOLING": ("mean", "mean"),
    "MSTAR_EMBEDDING_MAX_INPUTS": ("32", 32),
    "MSTAR_API_KEYS_FILE": (str(KEYS_FILE), KEYS_FILE),
    "MSTAR_PRIORITY_PREEMPTION": ("off", False),
    "MSTAR_OTLP_ENDPOINT": ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
    "MSTAR_CORS_ORIGINS": ("https://a.example,*", "https://a.example,*"),
    "MSTAR_SCORE_TEMPLATE": ("/tmp/pair.txt", Path("/tmp/pair.txt")),
    "MSTAR_SCORE_TOKENS": ("no,yes", "no,yes"),
    "MSTAR_ROUTE_POLICY": ("least_loaded", "least_loaded"),
    "MSTAR_ROUTE_MAX_IMBALANCE": ("4", 4),
    "MSTAR_HF_TOKEN": ("hf_abc", SecretStr("hf_abc")),
    "MSTAR_HF_HOME": ("/tmp/hf", Path("/tmp/hf")),
    "MSTAR_HF_HUB_OFFLINE": ("1", True),
    "MSTAR_HF_ENDPOINT": ("http://127.0.0.1:9", "http://127.0.0.1:9"),
    "MSTAR_PLAYGROUND": ("off", False),
    "MSTAR_ENCODER_PLACEMENT": ("audio_encoder=process", "audio_encoder=process"),
    "MSTAR_MAX_AUDIO_BYTES": ("1000000", 1000000),
    "MSTAR_MAX_AUDIO_SECONDS": ("60", 60.0),
    "MSTAR_MAX_AUDIO_SECONDS_PER_REQUEST": ("120", 120.0),
    "MSTAR_MAX_AUDIO_PARTS_PER_REQUEST": ("2", 2),
    "MSTAR_MAX_SPEECH_INPUT_CHARS": ("200", 200),
    "MSTAR_MAX_SPEECH_SECONDS": ("12.5", 12.5),
    "MSTAR_MAX_SPEECH_CODEC_BYTES": ("65536", 65536),
}


def test_every_knob_has_a_valid_example():
    assert sorted(VALID) == sorted(k.env for k in KNOBS)


def test_defaults_without_environment():
    loaded = load({})
    assert loaded.problems == ()
    assert loaded.settings == WorkerSettings()
    assert loaded.settings.launch_wait_ms == 5.0
    assert loaded.settings.max_consecutive_spec_steps == "auto"
    assert loaded.settings.recompile_limit == 84
    assert loaded.settings.port == 8000
    assert loaded.settings.api_key is None
    assert loaded.settings.max_model_len is None
    assert all(str(s) == "default" for s in loaded.sources.values())


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.env)
def test_valid_value_is_used_exactly(knob):
    text, expected = VALID[knob.env]
    loaded = load({knob.env: text})
    assert all(p.stale for p in loaded.problems) and len(loaded.problems) == bool(knob.no_effect)
    assert getattr(loaded.settings, knob.name) == expected
    assert str(loaded.sources[knob.name]) == "environment"


def test_secret_is_kept_and_masked():
    loaded = load({"MSTAR_API_KEY": "s3cret"})
    assert loaded.settings.api_key.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(loaded.settings)
    assert loaded.changed() == [("MSTAR_API_KEY", "********", loaded.sources["api_key"])]


@pytest.mark.parametrize(("env", "raw"), [
    ("MSTAR_LAUNCH_WAIT_MS", "5ms"),
    ("MSTAR_LAUNCH_WAIT_MS", "abc"),
    ("MSTAR_LAUNCH_WAIT_MS", "nan"),
    ("MSTAR_LAUNCH_WAIT_MS", "inf"),
    ("MSTAR_LAUNCH_WAIT_MS", "-inf"),
    ("MSTAR_MAX_CONSECUTIVE_SPEC_STEPS", "1e3"),
    ("MSTAR_MAX_CONSECUTIVE_SPEC_STEPS", "1e20"),
    ("MSTAR_KV_BLOCK_SIZE", "16.0"),
    ("MSTAR_PORT", "abc"),
    ("MSTAR_ENABLE_PREFIX_CACHING", "maybe"),
    ("MSTAR_DTYPE", "fp8"),
    ("MSTAR_QUANTIZATION", "int4"),
    ("MSTAR_KV_CACHE_DTYPE", "fp8"),
    ("MSTAR_CUDA_GRAPH_BATCH_SIZES", "1,2,x"),
    ("MSTAR_CUDA_GRAPH_BATCH_SIZES", "1,,4"),
    ("MSTAR_CUDA_GRAPH_BATCH_SIZES", "1,0"),
    ("MSTAR_PY_SWITCH_INTERVAL_SEC", "0"),
    ("MSTAR_PY_SWITCH_INTERVAL_SEC", "-1"),
])
def test_malformed_value_warns_and_falls_back_to_default(env, raw):
    knob = next(k for k in KNOBS if k.env == env)
    loaded = load({env: raw})
    assert getattr(loaded.settings, knob.name) == knob.default
    [problem] = loaded.problems
    assert (problem.variable, problem.value) == (env, raw)
    assert problem.used == knob.default
    assert raw in str(loaded.sources[knob.name]) and "fallback" in str(loaded.sources[knob.name])
    assert env in problem.message() and repr(raw) in problem.message()


def test_float_above_maximum_is_lowered_to_it():
    loaded = load({"MSTAR_LAUNCH_WAIT_MS": "1e20"})
    assert loaded.settings.launch_wait_ms == threading.TIMEOUT_MAX * 1000
    [problem] = loaded.problems
    assert "above the maximum" in problem.reason


@pytest.mark.parametrize(("env", "raw", "expected"), [
    ("MSTAR_LAUNCH_WAIT_MS", "-5", 0.0),
    ("MSTAR_MAX_CONSECUTIVE_SPEC_STEPS", "-1", 0),
    ("MSTAR_RECOMPILE_LIMIT", "2", 8),
    ("MSTAR_RECOMPILE_LIMIT", "5000", 1024),
    ("MSTAR_PORT", "0", 1),
    ("MSTAR_PORT", "70000", 65535),
    ("MSTAR_MAX_CONCURRENT_REQUESTS", "-3", 1),
])
def test_out_of_range_is_clamped_with_a_warning(env, raw, expected):
    knob = next(k for k in KNOBS if k.env == env)
    loaded = load({env: raw})
    assert getattr(loaded.settings, knob.name) == expected
    [problem] = loaded.problems
    assert problem.used == expected and problem.value == raw
    assert "clamped" in str(loaded.sources[knob.name])


@pytest.mark.parametrize("raw", ["", "   ", "\t"])
def test_empty_or_whitespace_counts_as_unset(raw):
    loaded = load({"MSTAR_LAUNCH_WAIT_MS": raw, "MSTAR_NUM_KV_BLOCKS": raw})
    assert loaded.problems == ()
    assert loaded.settings.launch_wait_ms == 5.0 and loaded.settings.num_kv_blocks is None


def test_whitespace_around_a_valid_value_is_ignored():
    assert load({"MSTAR_PORT": " 9000 "}).settings.port == 9000


def test_cap_of_zero_turns_speculation_off_with_a_notice():
    loaded = load({"MSTAR_MAX_CONSECUTIVE_SPEC_STEPS": "0"})
    assert loaded.settings.max_consecutive_spec_steps == 0
    assert loaded.problems == ()
    assert any("speculative scheduling" in n and "serial loop" in n for n in loaded.notices)
    assert load({}).notices == ()


def test_unknown_name_suggests_the_closest_knob():
    loaded = load({"MSTAR_LAUNCH_WAIT": "5", "MSTAR_QWERTYUIOP": "1", "HOME": "/root"})
    messages = {p.variable: p.reason for p in loaded.problems}
    assert messages["MSTAR_LAUNCH_WAIT"] == "unknown setting; did you mean MSTAR_LAUNCH_WAIT_MS?"
    assert messages["MSTAR_QWERTYUIOP"] == "unknown setting"
    assert "HOME" not in messages


def test_strict_mode_lists_every_problem_at_once():
    environ = {"MSTAR_LAUNCH_WAIT_MS": "5ms", "MSTAR_PORT": "-1", "MSTAR_LAUNCH_WAIT": "1"}
    with pytest.raises(SettingsError) as info:
        load(environ, strict=True)
    assert {p.variable for p in info.value.problems} == {
        "MSTAR_LAUNCH_WAIT_MS", "MSTAR_PORT", "MSTAR_LAUNCH_WAIT"}
    assert "3 configuration problem(s)" in str(info.value)


def test_strictness_knob_turns_on_strict_mode():
    with pytest.raises(SettingsError):
        load({"MSTAR_CONFIG_STRICTNESS": "strict", "MSTAR_PORT": "x"})
    assert load({"MSTAR_CONFIG_STRICTNESS": "strict"}).problems == ()


def test_settings_are_frozen():
    settings = load({}).settings
    with pytest.raises(ValidationError):
        settings.launch_wait_ms = 1.0


def test_settings_object_does_not_read_the_environment(monkeypatch):
    monkeypatch.setenv("MSTAR_PORT", "9999")
    assert WorkerSettings().port == 8000


@settings(max_examples=300, deadline=None)
@given(knob=st.sampled_from(KNOBS), raw=st.text(max_size=30))
def test_any_text_never_raises_and_stays_within_bounds(knob, raw):
    try:
        value = getattr(load({knob.env: raw}).settings, knob.name)
    except SettingsError as error:  # only a security knob fails closed
        assert knob.security and [p.variable for p in error.problems] == [knob.env]
        return
    except SettingsUsageError as error:  # the keys file, read with the settings, fails closed
        assert knob.env == "MSTAR_API_KEYS_FILE" and knob.env in str(error)
        return
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v)
            if knob.minimum is not None:
                assert v > knob.minimum if knob.min_exclusive else v >= knob.minimum
            if knob.maximum is not None:
                assert v <= knob.maximum
    if knob.choices:
        assert value in knob.choices


def test_hugging_face_variables_are_knobs_and_the_mstar_names_win():
    loaded = load({"HF_HOME": "/a", "HF_HUB_OFFLINE": "1", "HF_TOKEN": "t",
                   "HF_ENDPOINT": "http://mirror", "MSTAR_HF_HOME": "/b"})
    settings = loaded.settings
    assert settings.hf_home == Path("/b") and settings.hf_hub_offline is True
    assert settings.hf_token.get_secret_value() == "t" and settings.hf_endpoint == "http://mirror"
    assert str(loaded.sources["hf_hub_offline"]) == "HF_HUB_OFFLINE"
    assert str(loaded.sources["hf_home"]) == "environment"
    assert loaded.problems == ()
