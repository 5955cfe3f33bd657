#!/usr/bin/env bash
# The GPU checks, as one run on a machine with CUDA, in under 8 minutes (see docs/gpu.rst):
#   1. the engine and worker-loop tests with mstar on CUDA against the CPU transformers oracle
#      (fp32 greedy parity), the Triton kernels compiled at real shapes against their torch
#      paths;
#   2. the Triton kernels timed against their torch paths (benchmark/gpu_kernels.py);
#   3. the throughput table (benchmark/gpu_table.py): bf16 offline at batch 1, 32 and 256 with
#      transformers generate at the same sizes, overlap on versus cap 0.
# Expects a python3 with torch (a CUDA build, which brings triton) and transformers. mstar's other
# pure-Python dependencies (pydantic, pydantic-settings, structlog, msgpack, pyzmq, ...) may be
# missing there: build them here as wheels into a folder inside the working tree and pass it as
# $1; they are installed without network (docs/gpu.rst shows the commands).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${1:-}" ]; then python3 -m pip install -q --no-index --no-deps "$1"/*.whl; fi
export PYTHONPATH=. HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers, triton
print('torch', torch.__version__, 'transformers', transformers.__version__, 'triton', triton.__version__)"

echo "== tests on CUDA"
timeout 210 python3 -m pytest -q -p no:cacheprovider --device cuda test/models/test_parity_models.py \
    test/engine/test_engine_scheduler.py test/engine/test_engine_sampling.py test/engine/test_worker_loop.py \
    test/models/test_triton_kernels.py || status=1

echo "== kernels: Triton versus torch"
timeout 45 python3 -m benchmark.gpu_kernels || status=1

echo "== throughput (bf16, prompts of 32 tokens, 128 output tokens)"
timeout 190 python3 -m benchmark.gpu_table || status=1
exit $status
