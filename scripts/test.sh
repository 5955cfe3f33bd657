#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint, docs drift, docs build, CPU tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check mstar test benchmark scripts
.venv/bin/mstar config docs --check
.venv/bin/sphinx-build -W -q -b html docs docs/_build/html
.venv/bin/pytest -q @test/cpu-core.txt "$@"
# The built-in model's API tests once more in bf16 (what MSTAR_DTYPE=auto picks on CPUs with
# avx512_bf16 or AMX; emulated, and slower, elsewhere): json_schema output and logit_bias.
.venv/bin/pytest -q test/test_openai_builtin.py --builtin-dtype=bfloat16 "$@"
