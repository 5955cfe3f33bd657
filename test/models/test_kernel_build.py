"""The native CPU ops' build (``mstar.kernels.cpu.build``): a build killed mid-way leaves torch's
lock file behind, and the next process must not wait on it forever (every later worker would
hang at start)."""

from __future__ import annotations

import subprocess
import sys

from mstar.kernels.cpu.build import TORCH_BATON, build_dir

LOAD = ("import sys; from pathlib import Path; from mstar.kernels.cpu.build import native_kernels;"
        " sys.exit(0 if native_kernels(Path(sys.argv[1])) else 1)")


def test_a_lock_left_by_a_killed_build_does_not_hang_the_next(best_level, builtin_cache_dir):
    baton = build_dir(builtin_cache_dir) / TORCH_BATON  # best_level: built once already
    baton.write_text("")  # what a build killed between torch's lock and unlock leaves
    subprocess.run([sys.executable, "-c", LOAD, str(builtin_cache_dir)], check=True, timeout=90)
    assert not baton.exists()
