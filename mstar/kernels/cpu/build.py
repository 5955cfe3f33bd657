"""Builds the native CPU ops on first use and loads them as ``torch.ops.mstar_cpu``: the quantized
and bf16-weight linears, the fused per-token ops, paged decode attention and decoder layers.

The build uses the machine's C++ compiler through ``torch.utils.cpp_extension`` and is cached
under ``<cache_dir>/kernels/<hash>``, keyed by the sources, the flags, the torch version and the
checkout's path (two checkouts sharing one build directory would rewrite each other's ninja file). One
build serves every x86-64 CPU: the SIMD kernels are compiled per instruction-set level and chosen
at run time from the CPU's features (csrc/cpu_level.h, mirrored in levels.py), so no
``-march=native``. When no compiler is available or the build fails, one warning is logged and
the models keep their torch paths (the quantized layers dequantize, then run a float32 matmul):
correct, slower.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
from pathlib import Path

import structlog
import torch

log = structlog.get_logger(__name__)

SOURCES = Path(__file__).with_name("csrc")  # ops.cpp and the headers it includes
LIBRARY = "mstar_cpu"
_CFLAGS = ["-O3", "-fopenmp"]  # no -march: SIMD code is compiled per level (csrc/common.h)
# torch's own build lock (a file that a killed build leaves behind, after which every later build
# waits on it forever) and ours beside it (a kernel lock, released when its holder dies).
TORCH_BATON = "lock"
BUILD_LOCK = "mstar-build.lock"
_state: dict[str, bool] = {}


def build_dir(cache_dir: Path) -> Path:
    key = hashlib.sha256(
        b"".join(path.read_bytes() for path in sorted(SOURCES.glob("*.[ch]*")))
        + torch.__version__.encode() + str(_CFLAGS).encode()
        + str(SOURCES.resolve()).encode()  # each checkout its own build: ninja files hold paths
    ).hexdigest()[:16]
    return Path(cache_dir).expanduser() / "kernels" / key


def native_kernels(cache_dir: Path) -> bool:
    """True when ``torch.ops.mstar_cpu`` is usable; builds (once per process and cache) if needed."""
    if "ok" not in _state:
        _state["ok"] = _load(cache_dir)
    return _state["ok"]


def _load(cache_dir: Path) -> bool:
    if hasattr(torch.ops, LIBRARY) and hasattr(getattr(torch.ops, LIBRARY), "q4_linear"):
        return True
    directory = build_dir(cache_dir)
    try:
        from torch.utils.cpp_extension import load

        directory.mkdir(parents=True, exist_ok=True)
        with _building(directory), contextlib.redirect_stdout(io.StringIO()):
            load(f"{LIBRARY}_kernels", [str(SOURCES / "ops.cpp")], extra_cflags=_CFLAGS,
                 build_directory=str(directory), is_python_module=False, verbose=False)
    except Exception as error:  # no compiler, no headers, a failed build: fall back to torch
        log.warning("cpu_kernels_unavailable", error=str(error).splitlines()[0][:300],
                    fallback="dequantize + float32 matmul (slower)")
        return False
    log.info("cpu_kernels_loaded", build_dir=str(directory))
    return True


@contextlib.contextmanager
def _building(directory: Path):
    """One build or load at a time in ``directory``, under a kernel lock (``flock``: released
    when its holder dies, however). Holding it, no other process of ours is building here, so a
    torch baton file still present was left by a build that was killed: it is removed, where
    torch would wait for it forever."""
    with open(directory / BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        baton = directory / TORCH_BATON
        if baton.exists():
            log.warning("cpu_kernels_stale_lock_removed", path=str(baton))
            baton.unlink(missing_ok=True)
        yield
