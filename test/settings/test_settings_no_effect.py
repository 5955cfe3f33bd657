"""Knobs that no longer do anything still parse and warn; MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=auto."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mstar.engine.schedule.overlap_policy import overlap_cap
from mstar.settings import load_settings
from mstar.settings.catalog import BY_ENV


def test_a_knob_with_no_effect_parses_and_warns_even_in_strict_mode(tmp_path):
    env_file = tmp_path / "old.env"
    env_file.write_text("MSTAR_CUDA_GRAPH=false\nMSTAR_CUDA_GRAPH_BATCH_SIZES=1,2,4\n")
    for strict in (False, True):
        loaded = load_settings(env_files=[env_file], environ={}, strict=strict)
        assert loaded.settings.cuda_graph is False
        assert loaded.settings.cuda_graph_batch_sizes == [1, 2, 4]
        messages = [p.message() for p in loaded.problems]
        assert len(messages) == 2
        assert all("has no effect since" in m for m in messages)
        assert "MSTAR_CUDA_GRAPH:" in messages[0] and str(env_file) in messages[0]


def test_a_knob_with_no_effect_left_at_its_default_says_nothing():
    assert load_settings(environ={}).problems == ()


def test_config_show_marks_a_knob_with_no_effect():
    shown = subprocess.run([sys.executable, "-m", "mstar", "config", "show"], capture_output=True,
                           text=True, check=True, env={"PATH": ""}).stdout
    line = shown.split("MSTAR_CUDA_GRAPH =", 1)[1].splitlines()[1]
    assert "NO EFFECT since" in line
    live = shown.split("MSTAR_MAX_NUM_SEQS =", 1)[1].splitlines()[1]
    assert "NO EFFECT" not in live
    assert BY_ENV["MSTAR_CUDA_GRAPH"].no_effect and not BY_ENV["MSTAR_MAX_NUM_SEQS"].no_effect


@pytest.mark.parametrize(("raw", "value"), [("auto", "auto"), ("AUTO", "auto"), ("0", 0),
                                            ("16", 16), ("-1", 0)])
def test_overlap_cap_takes_auto_or_a_number(raw, value):
    loaded = load_settings(environ={"MSTAR_MAX_CONSECUTIVE_SPEC_STEPS": raw})
    assert loaded.settings.max_consecutive_spec_steps == value


def test_auto_is_serial_on_cpu_and_overlapped_on_cuda_and_numbers_keep_their_meaning():
    assert load_settings(environ={}).settings.max_consecutive_spec_steps == "auto"
    assert overlap_cap("auto", "cpu") == 0
    assert overlap_cap("auto", "cuda") == 1024
    assert overlap_cap(0, "cuda") == 0
    assert overlap_cap(7, "cpu") == 7
